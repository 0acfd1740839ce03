"""The zip archive a folder recovery keeps: written member by member, then checked against its manifest.

Member names are the manifest's paths, which come from the ZVM's browse listing and are checked
(``safe_relative``); no name from a zip the ZVM sent is ever used. It is the one file a folder recovery stores,
so the authenticated download serves it as any other.
"""

from __future__ import annotations

import hashlib
import os
import unicodedata
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from rewind.lib.errors import ApplicationError

CHUNK = 1 << 20
# Control, format and separator characters: never part of a name this service keeps.
_NEVER_IN_A_NAME = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
_ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)


@dataclass(frozen=True)
class ManifestEntry:
    """One file of a folder recovery: where it sits below the folder, and what it was."""

    path: str
    size: int
    sha256: str
    modified: str | None  # the ZVM's LastWriteTime (ISO 8601), when it gave one

    def as_json(self) -> dict[str, Any]:
        return {"path": self.path, "size": self.size, "sha256": self.sha256, "modified": self.modified}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> ManifestEntry:
        return cls(path=raw["path"], size=int(raw["size"]), sha256=raw["sha256"], modified=raw.get("modified"))


class StorageFailed(Exception):
    """Writing the archive here failed (a full disk, a read-only folder): our side, not the ZVM's."""

    def __init__(self, oserror: OSError) -> None:
        super().__init__(str(oserror))
        self.oserror = oserror


class TooManyBytes(Exception):
    """A file sent more bytes than the folder's byte limit leaves room for."""


def safe_relative(rel: str) -> str:
    """``rel`` when every segment is a plain name; else ``ApplicationError`` (a zip-slip guard): no empty, ``.`` or
    ``..`` segment, leading ``/``, backslash, drive-like ``x:`` segment, control or format character."""
    segments = rel.split("/")
    for seg in segments:
        if (
            seg in ("", ".", "..")
            or "\\" in seg
            or ":" in seg
            or any(unicodedata.category(ch) in _NEVER_IN_A_NAME for ch in seg)
        ):
            raise ApplicationError(f"the ZVM listed {rel!r}, which is not a name this service can keep")
    return rel


class CappedSink:
    """Where one file's bytes go: the archive member, at most ``room`` bytes. A refused write raises
    ``StorageFailed`` (never read as the ZVM's failure); one past ``room`` raises ``TooManyBytes``."""

    def __init__(self, member: IO[bytes], room: int) -> None:
        self._member = member
        self.room = room
        self.written = 0

    def write(self, data: bytes) -> int:
        if self.written + len(data) > self.room:
            raise TooManyBytes()
        try:
            self._member.write(data)
        except OSError as exc:
            raise StorageFailed(exc) from exc
        self.written += len(data)
        return len(data)

    def flush(self) -> None:
        return None


def _zip_time(modified: datetime | None) -> tuple[int, int, int, int, int, int]:
    if modified is None:
        return _ZIP_EPOCH
    when = modified.astimezone(UTC)
    if when.year < 1980 or when.year > 2107:
        return _ZIP_EPOCH
    return (when.year, when.month, when.day, when.hour, when.minute, when.second)


@contextmanager
def archive_writing(partial: Path) -> Iterator[zipfile.ZipFile]:
    """A new zip at ``partial``; a failure to create or finish it is ``StorageFailed``."""
    try:
        archive = zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_DEFLATED, allowZip64=True)
    except OSError as exc:
        raise StorageFailed(exc) from exc
    try:
        yield archive
    finally:
        try:
            archive.close()
        except OSError as exc:
            raise StorageFailed(exc) from exc


@contextmanager
def member_writing(archive: zipfile.ZipFile, rel: str, modified: datetime | None) -> Iterator[IO[bytes]]:
    info = zipfile.ZipInfo(safe_relative(rel), date_time=_zip_time(modified))
    info.compress_type = zipfile.ZIP_DEFLATED
    try:
        member = archive.open(info, "w", force_zip64=True)
    except OSError as exc:
        raise StorageFailed(exc) from exc
    try:
        yield member
    finally:
        try:
            member.close()
        except OSError as exc:
            raise StorageFailed(exc) from exc


def archive_digest(path: Path) -> tuple[int, str]:
    """Size and sha256 of the archive file itself (what its download serves)."""
    digest, size = hashlib.sha256(), 0
    with path.open("rb") as file:
        while chunk := file.read(CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


def archive_verify(path: Path, entries: list[ManifestEntry]) -> None:
    """Every manifest entry is in the archive, with its size and sha256, and nothing else is; else
    ``ApplicationError`` naming the first difference (the archive is not kept then)."""
    with zipfile.ZipFile(path) as archive:
        names = [info.filename for info in archive.infolist()]
        if sorted(names) != sorted(e.path for e in entries):
            raise ApplicationError("the folder's archive does not hold exactly the files of its manifest")
        for entry in entries:
            digest, size = hashlib.sha256(), 0
            with archive.open(entry.path) as member:
                while chunk := member.read(CHUNK):
                    digest.update(chunk)
                    size += len(chunk)
            if size != entry.size or digest.hexdigest() != entry.sha256:
                raise ApplicationError(f"{entry.path} reads back from the folder's archive other than it was written")


@contextmanager
def archive_member_open(archive_path: Path, entry: ManifestEntry) -> Iterator[IO[bytes]]:
    """One file of a kept archive, by its manifest entry (for a step that applies files one by one)."""
    with zipfile.ZipFile(archive_path) as archive, archive.open(safe_relative(entry.path)) as member:
        yield member


def replace_into_place(partial: Path, final: Path) -> None:
    try:
        os.replace(partial, final)
    except OSError as exc:
        raise StorageFailed(exc) from exc
