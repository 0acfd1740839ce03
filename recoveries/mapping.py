"""Map a guest path to the one FLR path that holds it, using only what the ZVM lists (docs/recovery.md, "Finding
the path in the guest").

FLR shows partitions, not mount points or drive letters, and the API documents neither how a browse of a missing
folder answers nor how names compare. So the mapping never guesses a path and never reads an error as "absent":
it walks down from each partition's root, browsing only folders the parent listed (each at most once), and uses
the ZVM's own spelling of every name. Exactly one match is used; none, several or a folder (unless asked for) is
an error naming what was looked at.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterable
from dataclasses import dataclass

from recoveries.flr_sessions import session_lookup
from recoveries.paths import GuestPath
from rewind.lib.errors import ApplicationError, NotFoundError
from rewind.zvm import BrowseItem, ZvmClient, ZvmError, ZvmNotFoundError

# File systems whose names compare without regard to case.
_CASELESS_FS = re.compile(r"ntfs|fat|refs", re.IGNORECASE)
_CASED_FS = re.compile(r"ext\d|xfs|btrfs|zfs|jfs|reiser|ufs|hfs", re.IGNORECASE)
_WINDOWS_SYSTEM = "windows"
_FSTAB_MAX_BYTES = 64 * 1024
_UNREAD = object()


def _fstab_mount_points(raw: bytes) -> set[str]:
    points = set()
    for line in raw.decode("utf-8", "replace").splitlines():
        fields = line.split("#", 1)[0].split()
        if len(fields) >= 2 and fields[1].startswith("/"):
            points.add(fields[1].replace("\\040", " ").rstrip("/") or "/")
    return points


class SessionVanished(Exception):
    """The FLR session is gone (ZVM restart, unmount by someone else)."""


@dataclass(frozen=True)
class Match:
    flr_path: str
    item: BrowseItem


@dataclass(frozen=True)
class _Partition:
    path: str  # as the ZVM spells it, e.g. "partition#2 Ext4"
    caseless: bool


class _Browser:
    """Browses one mounted session, each folder at most once."""

    def __init__(self, client: ZvmClient, session_id: str, vm_identifier: str) -> None:
        self.client = client
        self.session_id = session_id
        self.vm_identifier = vm_identifier
        self._listings: dict[str, list[BrowseItem]] = {}
        self._fstab: set[str] | object | None = _UNREAD

    def listing(self, folder: str) -> list[BrowseItem]:
        """The children of ``folder`` (an FLR path the ZVM listed; "" for the partitions). A failure is never read
        as empty or missing: the parent listed the folder, so the caller learns what the ZVM answered."""
        if folder not in self._listings:
            try:
                result = self.client.flr_browse(self.session_id, folder)
            except ZvmError as exc:
                self._check_session()
                where = f"the folder {folder}" if folder else "the partitions"
                raise ApplicationError(f"{self.client.conn.site_name} could not list {where}: {exc}") from exc
            self._listings[folder] = [_with_full_path(folder, item) for item in result.items]
        return self._listings[folder]

    def _check_session(self) -> None:
        """Raise SessionVanished when the session itself is gone (the usual reason a browse fails)."""
        try:
            session = session_lookup(self.client, self.session_id, self.vm_identifier)
        except ZvmNotFoundError:
            raise SessionVanished(self.session_id) from None
        except ZvmError:
            return  # cannot tell; the browse error is reported as it is
        if session.is_terminal:
            raise SessionVanished(self.session_id)

    def child(self, folder: str, name: str, caseless: bool) -> BrowseItem | None:
        """The entry called ``name`` in ``folder``'s listing, or None when it lists none."""
        items = self.listing(folder)
        exact = [item for item in items if item.name == name]
        if exact or not caseless:
            return exact[0] if exact else None
        folded = [item for item in items if item.name.casefold() == name.casefold()]
        if len(folded) > 1:
            spelled = ", ".join(item.name for item in folded)
            raise ApplicationError(
                f"{folder or 'the mount'} lists several entries named {name!r} in different case: {spelled}"
            )
        return folded[0] if folded else None

    def walk(self, part: _Partition, segments: Iterable[str]) -> BrowseItem | None:
        """Follow ``segments`` down from ``part``'s root through the listings; None if absent."""
        folder = part.path
        item: BrowseItem | None = None
        for name in segments:
            if item is not None:
                if not _is_folder(item):
                    return None  # a file where the path needs a folder
                folder = item.path
            item = self.child(folder, name, part.caseless)
            if item is None:
                return None
        return item

    def fstab_mounts(self, roots: list[_Partition]) -> set[str] | None:
        """The mount points /etc/fstab lists on the root partitions; None when none is readable."""
        if self._fstab is _UNREAD:
            self._fstab = None
            for root in roots:
                item = self.walk(root, ("etc", "fstab"))
                if item is None or not _is_file(item) or (item.size_in_bytes or 0) > _FSTAB_MAX_BYTES:
                    continue
                sink = io.BytesIO()
                try:
                    self.client.flr_download(self.session_id, item.path, sink)
                except ZvmError:
                    continue  # an unreadable fstab decides nothing
                self._fstab = (self._fstab or set()) | _fstab_mount_points(sink.getvalue())
        return self._fstab if isinstance(self._fstab, set) else None

    def is_empty_folder(self, part: _Partition, segments: tuple[str, ...]) -> bool:
        item = self.walk(part, segments)
        return item is not None and _is_folder(item) and not self.listing(item.path)


def _with_full_path(folder: str, item: BrowseItem) -> BrowseItem:
    """The item with its path from the mount root, however the ZVM spelled it: item paths appear to be full paths
    (inferred, undocumented), and a bare name is joined to the parent's own path."""
    path = item.path.strip("/")
    if folder and not path.lower().startswith(folder.lower() + "/"):
        path = f"{folder}/{item.name}" if path else folder
    if path == item.path:
        return item
    return BrowseItem(
        path=path,
        type=item.type,
        is_browsable=item.is_browsable,
        is_downloadable=item.is_downloadable,
        size_in_bytes=item.size_in_bytes,
        not_downloadable_reason=item.not_downloadable_reason,
        creation_time=item.creation_time,
        last_access_time=item.last_access_time,
        last_write_time=item.last_write_time,
    )


def _is_folder(item: BrowseItem) -> bool:
    kind = (item.type or "").lower()
    if kind in ("folder", "directory", "partition", "disk"):
        return True
    return kind == "" and item.is_browsable


def _is_file(item: BrowseItem) -> bool:
    kind = (item.type or "").lower()
    return kind == "file" or (kind == "" and item.is_downloadable and not item.is_browsable)


def _caseless(partition_name: str, guest: GuestPath) -> bool:
    if _CASELESS_FS.search(partition_name):
        return True
    if _CASED_FS.search(partition_name):
        return False
    return guest.os == "windows"  # a file system the name does not tell: the guest's own rule


def map_guest_path(
    client: ZvmClient, session_id: str, guest: GuestPath, *, vm_identifier: str, recursive: bool = False
) -> Match:
    """The single file ``guest`` names in the mounted session (``recursive``: a folder, or a file). Raises
    ``NotFoundError`` (no partition holds it), ``ApplicationError`` (several do, it is a folder, or a listing
    failed on the way) or ``SessionVanished``."""
    browser = _Browser(client, session_id, vm_identifier)
    parts = [_Partition(item.path, _caseless(item.path, guest)) for item in _partitions(browser)]
    if not parts:
        raise NotFoundError(
            f"the mounted checkpoint of this VM shows no partitions, so {guest.original} cannot be found"
        )
    if guest.os == "windows":
        matches = _windows(browser, parts, guest)
    else:
        matches = _linux(browser, parts, guest)
    return _one_match(matches, parts, guest, recursive)


def list_folder(client: ZvmClient, session_id: str, folder: str, *, vm_identifier: str) -> list[BrowseItem]:
    """One folder's listing, each item with its full FLR path; raises ``ApplicationError`` (the ZVM could not list
    it) or ``SessionVanished``."""
    return _Browser(client, session_id, vm_identifier).listing(folder)


def is_folder(item: BrowseItem) -> bool:
    return _is_folder(item)


def is_file(item: BrowseItem) -> bool:
    return _is_file(item)


def _partitions(browser: _Browser) -> list[BrowseItem]:
    """The partitions of the mount; a multi-disk mount may list disks first (INFERRED)."""
    out: list[BrowseItem] = []
    for item in browser.listing(""):
        if (item.type or "").lower() == "disk":
            out.extend(child for child in browser.listing(item.path) if _is_folder(child))
        else:
            out.append(item)
    return out


# -- Linux ----------------------------------------------------------------------------------------


def _root_partitions(browser: _Browser, parts: list[_Partition]) -> list[_Partition]:
    roots = [p for p in parts if (etc := browser.child(p.path, "etc", p.caseless)) is not None and _is_folder(etc)]
    return roots or parts  # no partition looks like "/": any of them may be


def _linux(browser: _Browser, parts: list[_Partition], guest: GuestPath) -> list[Match]:
    segs = guest.segments
    roots = _root_partitions(browser, parts)
    on_root = [Match(item.path, item) for part in roots if (item := browser.walk(part, segs)) is not None]
    others = [p for p in parts if p not in roots]
    mounted: list[Match] = []
    certain = True  # every partition match sits under a folder "/" shows as a mount point
    for k in range(1, len(segs)):  # segs[:k] as the mount point of another partition
        holders = [r for r in roots if (f := browser.walk(r, segs[:k])) is not None and _is_folder(f)]
        if not holders:
            continue  # no such folder on "/": nothing can be mounted there
        found = [Match(item.path, item) for part in others if (item := browser.walk(part, segs[k:])) is not None]
        if not found:
            continue
        verdict = _is_mount_point(browser, holders, segs[:k]) if on_root else True
        if verdict is False:
            continue  # fstab mounts nothing there: "/" holds the file
        certain = certain and verdict is True
        mounted.extend(found)
    if mounted and certain:
        return mounted  # a mount hides what "/" has under its mount point, as in the guest
    return on_root + mounted  # more than one: refused as ambiguous, naming each


def _is_mount_point(browser: _Browser, roots: list[_Partition], folder: tuple[str, ...]) -> bool | None:
    """True when "/" shows ``folder`` as a mount point: an empty folder, or a line of
    /etc/fstab. None when that cannot be told (no fstab to read)."""
    if any(browser.is_empty_folder(root, folder) for root in roots):
        return True
    mounts = browser.fstab_mounts(roots)
    if mounts is None:
        return None
    return "/" + "/".join(folder) in mounts


# -- Windows --------------------------------------------------------------------------------------


def _skipped(browser: _Browser, part: _Partition) -> bool:
    """System Reserved, EFI and recovery partitions: never a drive an agent means."""
    label = part.path.lower()
    if "reserved" in label or "efi" in label or "recovery" in label:
        return True
    names = {item.name.casefold() for item in browser.listing(part.path)}
    if _WINDOWS_SYSTEM in names:
        return False
    if "bootmgr" in names or names == {"efi"} or names <= {"efi", "boot", "recovery", "system volume information"}:
        return bool(names)
    return False


def _windows(browser: _Browser, parts: list[_Partition], guest: GuestPath) -> list[Match]:
    usable = [p for p in parts if not _skipped(browser, p)]
    system = [p for p in usable if _has_windows_folder(browser, p)]
    if guest.drive == "C:":
        candidates = system or usable
    else:
        candidates = [p for p in usable if p not in system] or usable
    found = [(p, item) for p in candidates if (item := browser.walk(p, guest.segments)) is not None]
    if len(found) > 1 and guest.drive != "C:":
        # Data partitions take D:, E:, ... in their order; use that only to break a tie.
        data = [p for p in usable if p not in system]
        index = ord((guest.drive or "D:")[0].upper()) - ord("D")
        if 0 <= index < len(data):
            by_letter = [(p, item) for p, item in found if p == data[index]]
            if by_letter:
                found = by_letter
    return [Match(item.path, item) for _, item in found]


def _has_windows_folder(browser: _Browser, part: _Partition) -> bool:
    item = browser.child(part.path, "Windows", caseless=True)
    return item is not None and _is_folder(item)


# -- the answer -----------------------------------------------------------------------------------


def _one_match(matches: list[Match], parts: list[_Partition], guest: GuestPath, recursive: bool) -> Match:
    if not matches:
        raise NotFoundError(
            f"{guest.original} does not exist in this checkpoint "
            f"(looked on partitions: {', '.join(p.path for p in parts)})"
        )
    if len(matches) > 1:
        raise ApplicationError(
            f"{guest.original} is ambiguous in this checkpoint; it exists as {', '.join(m.flr_path for m in matches)}"
        )
    match = matches[0]
    if recursive and (_is_folder(match.item) or _is_file(match.item)):
        return match
    if not _is_file(match.item):
        raise ApplicationError(
            f"{guest.original} is a {(match.item.type or 'folder').lower()}, not a file ({match.flr_path}); "
            "ask with recursive=true to bring back the whole folder"
        )
    return match
