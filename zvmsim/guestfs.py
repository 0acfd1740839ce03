"""Guest file trees: partitions of files and folders, copied on write so a checkpoint is cheap.

A partition keeps flat dicts (relative path -> node); folders are explicit entries so that an
empty folder (web01's ``boot/`` on the root partition) exists. A checkpoint captures an
:class:`FsView` that shares those dicts; the live :class:`GuestFs` copies them before its next
change, so capturing costs O(partitions) and the captured tree never changes afterwards.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from .content import BytesContent, Content


class FsPathError(LookupError):
    """A path that does not exist (or cannot be mapped) in a guest tree."""


@dataclass(frozen=True)
class FileNode:
    content: Content
    ctime: float
    mtime: float


@dataclass
class Partition:
    name: str  # e.g. "partition#2 Ext4": the FLR browse name
    mount: str | None  # "/", "/boot", "C:", or None (System Reserved)
    files: dict[str, FileNode] = field(default_factory=dict)
    dirs: dict[str, float] = field(default_factory=dict)  # rel path -> ctime; "" is the root

    @property
    def case_insensitive(self) -> bool:
        return "ntfs" in self.name.lower()

    def copy(self) -> Partition:
        return Partition(self.name, self.mount, dict(self.files), dict(self.dirs))


@dataclass(frozen=True)
class Entry:
    """One browse result: a partition, folder or file inside a view."""

    path: str  # full FLR path, e.g. "partition#2 Ext4/etc/nginx"
    kind: str  # "Partition" | "Folder" | "File"
    node: FileNode | None
    ctime: float


def _norm_rel(rel: str) -> str:
    return "/".join(part for part in rel.split("/") if part)


class FsView:
    """A read-only guest tree (a checkpoint capture, or the live tree through GuestFs)."""

    def __init__(self, os_type: str, partitions: Iterable[Partition]) -> None:
        self.os_type = os_type
        self._parts = list(partitions)

    @property
    def partitions(self) -> list[Partition]:
        return self._parts

    def partition(self, name: str, fold: bool = True) -> Partition:
        for part in self._parts:
            if part.name == name or (fold and part.name.lower() == name.lower()):
                return part
        raise FsPathError(f"partition '{name}' does not exist")

    def split(self, flr_path: str, fold: bool = True) -> tuple[Partition, str]:
        """'partition#2 Ext4/etc/hostname' -> (partition, 'etc/hostname')."""
        head, _, rel = flr_path.strip("/").partition("/")
        return self.partition(head, fold), _norm_rel(rel)

    @staticmethod
    def _key(part: Partition, table: dict[str, object], rel: str, fold_ntfs: bool = True) -> str | None:
        if rel in table:
            return rel
        if part.case_insensitive and fold_ntfs:
            low = rel.lower()
            for key in table:
                if key.lower() == low:
                    return key
        return None

    def entry(self, flr_path: str, *, fold_ntfs: bool = True) -> Entry:
        """The entry at ``flr_path``. NTFS names match regardless of case unless
        ``fold_ntfs`` is off (a ZVM that compares them exactly); others always exactly."""
        part, rel = self.split(flr_path, fold=fold_ntfs)
        if rel == "":
            return Entry(part.name, "Partition", None, part.dirs.get("", 0.0))
        key = self._key(part, part.files, rel, fold_ntfs)  # type: ignore[arg-type]
        if key is not None:
            node = part.files[key]
            return Entry(f"{part.name}/{key}", "File", node, node.ctime)
        key = self._key(part, part.dirs, rel, fold_ntfs)  # type: ignore[arg-type]
        if key is not None:
            return Entry(f"{part.name}/{key}", "Folder", None, part.dirs[key])
        raise FsPathError(f"'{flr_path}' does not exist")

    def children(self, entry: Entry) -> list[Entry]:
        if entry.kind == "File":
            return []
        part, rel = self.split(entry.path)
        prefix = f"{rel}/" if rel else ""
        out: list[Entry] = []
        for key, ctime in part.dirs.items():
            if key and key.startswith(prefix) and "/" not in key[len(prefix) :]:
                out.append(Entry(f"{part.name}/{key}", "Folder", None, ctime))
        for key, node in part.files.items():
            if key.startswith(prefix) and "/" not in key[len(prefix) :]:
                out.append(Entry(f"{part.name}/{key}", "File", node, node.ctime))
        out.sort(key=lambda e: (e.kind != "Folder", e.path.lower()))
        return out

    def roots(self) -> list[Entry]:
        return [Entry(p.name, "Partition", None, p.dirs.get("", 0.0)) for p in self._parts]

    def guest_to_flr(self, guest_path: str) -> str:
        """Map a guest path ('/etc/nginx/nginx.conf', 'C:\\inetpub\\web.config', or an FLR path
        'partition#1 NTFS/bootmgr') to the FLR path of the partition that holds it."""
        path = guest_path.replace("\\", "/")
        if path.lower().startswith("partition#"):
            part, rel = self.split(path)
            return f"{part.name}/{rel}" if rel else part.name
        if len(path) >= 2 and path[1] == ":":
            drive = path[:2].upper()
            for part in self._parts:
                if (part.mount or "").upper() == drive:
                    return _join(part.name, _norm_rel(path[2:]))
            raise FsPathError(f"no partition is mounted as {drive}")
        if not path.startswith("/"):
            raise FsPathError(f"'{guest_path}' is not an absolute guest path")
        best: Partition | None = None
        for part in self._parts:
            mount = part.mount or ""
            if mount.startswith("/") and (mount == "/" or path == mount or path.startswith(mount.rstrip("/") + "/")):
                if best is None or len(mount) > len(best.mount or ""):
                    best = part
        if best is None:
            raise FsPathError(f"no partition holds '{guest_path}'")
        mount = best.mount or "/"
        rel = path[len(mount) :] if mount != "/" else path
        return _join(best.name, _norm_rel(rel))


def _join(name: str, rel: str) -> str:
    return f"{name}/{rel}" if rel else name


class GuestFs(FsView):
    """The live tree of one VM. snapshot() hands out a frozen view; writes copy first."""

    def __init__(self, os_type: str, partitions: Iterable[Partition]) -> None:
        super().__init__(os_type, partitions)
        self._shared = False

    def snapshot(self) -> FsView:
        self._shared = True
        return FsView(self.os_type, self._parts)

    def _own(self) -> None:
        if self._shared:
            self._parts = [p.copy() for p in self._parts]
            self._shared = False

    def write(self, guest_path: str, content: Content, now: float) -> str:
        """Create or replace a file (parents are created); returns its FLR path."""
        flr = self.guest_to_flr(guest_path)
        part_name, _, rel = flr.partition("/")
        if not rel:
            raise FsPathError(f"'{guest_path}' names a partition, not a file")
        self._own()
        part = self.partition(part_name)
        key = self._key(part, part.files, rel) or rel  # type: ignore[arg-type]
        if self._key(part, part.dirs, rel) is not None:  # type: ignore[arg-type]
            raise FsPathError(f"'{guest_path}' is a folder")
        old = part.files.get(key)
        part.files[key] = FileNode(content, old.ctime if old else now, now)
        _add_parents(part, key, now)
        return f"{part.name}/{key}"

    def delete(self, guest_path: str) -> str:
        flr = self.guest_to_flr(guest_path)
        part_name, _, rel = flr.partition("/")
        part = self.partition(part_name)
        key = self._key(part, part.files, rel)  # type: ignore[arg-type]
        if key is None:
            raise FsPathError(f"'{guest_path}' does not exist")
        self._own()
        part = self.partition(part_name)
        del part.files[key]
        return f"{part.name}/{key}"


def _add_parents(part: Partition, rel: str, now: float) -> None:
    pieces = rel.split("/")[:-1]
    for i in range(len(pieces)):
        part.dirs.setdefault("/".join(pieces[: i + 1]), now)


def build_partition(
    name: str, mount: str | None, files: dict[str, Content | str], ctime: float, empty_dirs: Iterable[str] = ()
) -> Partition:
    """A partition from a {rel path: content} template (str content is UTF-8 text)."""
    part = Partition(name, mount, dirs={"": ctime})
    for rel, content in files.items():
        body = BytesContent(content.encode()) if isinstance(content, str) else content
        part.files[rel] = FileNode(body, ctime, ctime)
        _add_parents(part, rel, ctime)
    for rel in empty_dirs:
        part.dirs.setdefault(_norm_rel(rel), ctime)
    return part
