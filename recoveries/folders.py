"""A folder comes back: walked breadth-first within the limits, every file fetched, one zip kept (docs/recovery.md,
"A whole folder").

The walk stops as soon as a limit is passed, refusing with the figures before a byte is downloaded. Each file
has a download call of its own: what a ZVM hands out for several paths is undocumented, while a one-path
download is the call the single-file recovery proves against every variant. Every name kept comes from the
browse listing and is checked, none from a zip the ZVM sent; every member is read back against the manifest.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import uuid
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import BinaryIO, cast

from django.conf import settings
from django.db import transaction

from recoveries.archive import (
    CappedSink,
    ManifestEntry,
    TooManyBytes,
    archive_digest,
    archive_verify,
    archive_writing,
    member_writing,
    replace_into_place,
    safe_relative,
)
from recoveries.flr_sessions import session_lookup
from recoveries.mapping import Match, SessionVanished, is_file, is_folder, list_folder
from recoveries.models import RecoveryRequest
from rewind.audit import SYSTEM, audit_record
from rewind.audit.actions import RecoveryAction
from rewind.lib.errors import ApplicationError
from rewind.zvm import BrowseItem, DownloadResult, ZvmClient, ZvmError, ZvmNotFoundError

logger = logging.getLogger(__name__)
_UNSAFE = re.compile(r"[^A-Za-z0-9._ -]+")


class FolderRefused(ApplicationError):
    """The folder is over a limit, or holds nothing to bring back: said with the figures."""


@dataclass(frozen=True)
class Limits:
    files: int
    bytes: int
    folders: int

    @classmethod
    def from_settings(cls) -> Limits:
        return cls(
            files=settings.REWIND_FOLDER_MAX_FILES,
            bytes=settings.REWIND_FOLDER_MAX_BYTES,
            folders=settings.REWIND_FOLDER_MAX_FOLDERS,
        )


@dataclass(frozen=True)
class Listed:
    """A file the walk found: its path below the folder, its FLR path, and what the listing says."""

    rel: str
    flr_path: str
    size: int | None
    modified: datetime | None


@dataclass
class Walked:
    files: list[Listed] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)  # {path, reason}
    names: set[str] = field(default_factory=set)  # every rel listed as a file
    folders: int = 0  # browsed
    listed_bytes: int = 0  # the sizes the listing gave

    @property
    def describe(self) -> str:
        return f"{len(self.files)} files ({self.listed_bytes} bytes as listed) in {self.folders} folders"


@dataclass(frozen=True)
class Session:
    client: ZvmClient
    session_id: str
    vm_identifier: str


@dataclass(frozen=True)
class Fetched:
    archive: Path
    size: int  # of the archive
    sha256: str  # of the archive
    entries: list[ManifestEntry]
    skipped: list[dict[str, str]]

    @property
    def total_bytes(self) -> int:
        return sum(e.size for e in self.entries)


def _child_name(folder: str, item: BrowseItem) -> str:
    """The item's own name in ``folder`` (its listed path is the folder's path and one more segment)."""
    prefix = folder + "/"
    if not item.path.lower().startswith(prefix.lower()):
        raise ApplicationError(f"the ZVM listed {item.path!r} inside {folder!r}, which is not below it")
    name = item.path[len(prefix) :]
    if "/" in name:
        raise ApplicationError(f"the ZVM listed {item.path!r} inside {folder!r}, more than one level below it")
    return safe_relative(name)


def _over_files(guest: str, limits: Limits, walked: Walked) -> FolderRefused:
    return FolderRefused(
        f"{guest} holds more than {limits.files} files (REWIND_FOLDER_MAX_FILES): {len(walked.files)} were listed "
        f"in the {walked.folders} folders browsed when the walk stopped; nothing was downloaded. Ask for a "
        "smaller folder, or an operator raises the limit"
    )


def _over_bytes(guest: str, limits: Limits, walked: Walked, last: Listed) -> FolderRefused:
    alone = f"; {last.rel} alone is {last.size} bytes" if (last.size or 0) > limits.bytes else ""
    return FolderRefused(
        f"{guest} holds more than {limits.bytes} bytes (REWIND_FOLDER_MAX_BYTES): the {len(walked.files)} files "
        f"listed when the walk stopped are {walked.listed_bytes} bytes{alone}; nothing was downloaded. Ask for a "
        "smaller folder, or an operator raises the limit"
    )


def _over_folders(guest: str, limits: Limits, walked: Walked) -> FolderRefused:
    return FolderRefused(
        f"{guest} holds more than {limits.folders} folders (REWIND_FOLDER_MAX_FOLDERS, one ZVM browse call "
        f"each): the walk stopped after {walked.folders}, having listed {len(walked.files)} files; nothing was "
        "downloaded. Ask for a smaller folder, or an operator raises the limit"
    )


def _add_file(walked: Walked, listed: Listed, guest: str, limits: Limits) -> None:
    if listed.rel in walked.names:
        raise ApplicationError(f"the ZVM listed {listed.rel!r} under {guest} twice; nothing was downloaded")
    walked.names.add(listed.rel)
    walked.files.append(listed)
    walked.listed_bytes += listed.size or 0
    if len(walked.files) > limits.files:
        raise _over_files(guest, limits, walked)
    if walked.listed_bytes > limits.bytes:
        raise _over_bytes(guest, limits, walked, listed)


def folder_walk(session: Session, root: Match, *, guest: str, limits: Limits) -> Walked:
    """Every file under ``root``, breadth-first, within ``limits`` (a file ``root`` is itself). Raises
    ``FolderRefused``, ``ApplicationError`` (a listing refused, a name that cannot be kept) or
    ``SessionVanished``."""
    walked = Walked()
    if is_file(root.item):
        _add_file(walked, _listed(safe_relative(root.item.name), root.item), guest, limits)
        return walked
    queue: deque[tuple[str, str]] = deque([(root.flr_path, "")])
    while queue:
        folder, prefix = queue.popleft()
        if walked.folders >= limits.folders:
            raise _over_folders(guest, limits, walked)
        walked.folders += 1
        for item in list_folder(session.client, session.session_id, folder, vm_identifier=session.vm_identifier):
            name = _child_name(folder, item)
            rel = f"{prefix}/{name}" if prefix else name
            if is_folder(item):
                queue.append((item.path, rel))
            elif is_file(item) and item.is_downloadable:
                _add_file(walked, _listed(rel, item), guest, limits)
            else:
                _skip(walked, rel, item, limits)
    if not walked.files:
        if walked.skipped:
            listed = ", ".join(f"{s['path']} ({s['reason']})" for s in walked.skipped[:5])
            raise FolderRefused(
                f"{guest} holds no file the ZVM will download in this checkpoint ({root.flr_path}); it lists {listed}"
            )
        raise FolderRefused(
            f"{guest} is an empty folder in this checkpoint ({root.flr_path}): there is no file to bring back"
        )
    return walked


def _skip(walked: Walked, rel: str, item: BrowseItem, limits: Limits) -> None:
    """A link or other entry the ZVM will not download: reported, never fetched (kept to a bounded list)."""
    if len(walked.skipped) < limits.files:
        reason = item.not_downloadable_reason or f"a {(item.type or 'entry').lower()} the ZVM will not download"
        walked.skipped.append({"path": rel, "reason": reason})


def _listed(rel: str, item: BrowseItem) -> Listed:
    return Listed(rel=rel, flr_path=item.path, size=item.size_in_bytes, modified=item.last_write_time)


def folder_fetch(session: Session, walked: Walked, *, dest: Path, name: str, guest: str, limits: Limits) -> Fetched:
    """Download every walked file into one zip at ``dest/name``; it, with its manifest. Raises ``FolderRefused``
    (more bytes than the limit), ``ApplicationError`` (a file other than listed, or not served),
    ``SessionVanished`` or ``StorageFailed``; nothing is kept then."""
    partial = dest / f".{uuid.uuid4().hex}.zip.part"
    final = dest / name
    try:
        entries = _write_archive(session, walked, partial, guest=guest, limits=limits)
        archive_verify(partial, entries)
        size, sha256 = archive_digest(partial)
        replace_into_place(partial, final)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return Fetched(final, size, sha256, entries, walked.skipped)


def _write_archive(
    session: Session, walked: Walked, partial: Path, *, guest: str, limits: Limits
) -> list[ManifestEntry]:
    entries: list[ManifestEntry] = []
    total = 0
    with archive_writing(partial) as archive:
        for listed in walked.files:
            with member_writing(archive, listed.rel, listed.modified) as member:
                sink = CappedSink(member, limits.bytes - total)
                result = _download(session, listed, sink, guest=guest, limits=limits, total=total)
            if listed.size is not None and result.size != listed.size:
                raise ApplicationError(
                    f"{listed.flr_path} came as {result.size} bytes, but the ZVM listed it as {listed.size}; "
                    "nothing was kept"
                )
            total += result.size
            entries.append(
                ManifestEntry(
                    path=listed.rel,
                    size=result.size,
                    sha256=result.sha256,
                    modified=listed.modified.isoformat() if listed.modified else None,
                )
            )
    return entries


def _download(
    session: Session, listed: Listed, sink: CappedSink, *, guest: str, limits: Limits, total: int
) -> DownloadResult:
    try:
        return session.client.flr_download(session.session_id, listed.flr_path, cast(BinaryIO, sink))
    except TooManyBytes:
        raise FolderRefused(
            f"{guest} holds more than {limits.bytes} bytes (REWIND_FOLDER_MAX_BYTES): {listed.rel} sent more than "
            f"the {limits.bytes - total} bytes left after the {total} bytes before it; nothing was kept"
        ) from None
    except ZvmNotFoundError as exc:
        # A 404 may mean the session went, or only the link (undocumented): look, never assume.
        _raise_if_vanished(session)
        raise ApplicationError(f"the ZVM would not serve {listed.flr_path}: {exc}") from exc


def _raise_if_vanished(session: Session) -> None:
    try:
        found = session_lookup(session.client, session.session_id, session.vm_identifier)
    except ZvmNotFoundError:
        raise SessionVanished(session.session_id) from None
    except ZvmError:
        return
    if found.is_terminal:
        raise SessionVanished(session.session_id)


def archive_name(match: Match) -> str:
    """The stored archive's file name: the folder's own name, made safe for this file system."""
    base = _UNSAFE.sub("_", match.item.name).strip(" .") or "folder"
    return f"{base}.zip"


def folder_recover(
    session: Session, match: Match, *, recovery: RecoveryRequest, dest: Path, request_id: str
) -> Fetched:
    """Walk, fetch and keep the folder ``match`` names for ``recovery``, audited once kept; raises what
    ``folder_walk`` and ``folder_fetch`` raise, and the caller unmounts either way."""
    guest = recovery.normalized_path
    limits = Limits.from_settings()
    walked = folder_walk(session, match, guest=guest, limits=limits)
    logger.info("recovery %s: %s holds %s", recovery.pk, guest, walked.describe)
    fetched = folder_fetch(session, walked, dest=dest, name=archive_name(match), guest=guest, limits=limits)
    with transaction.atomic():
        audit_record(
            actor=SYSTEM,
            action=RecoveryAction.FOLDER_DOWNLOADED,
            target=recovery,
            data={
                "flr_path": match.flr_path,
                "files": len(fetched.entries),
                "bytes": fetched.total_bytes,
                "folders": walked.folders,
                "skipped": len(fetched.skipped),
                "archive_sha256": fetched.sha256,
                "archive_size": fetched.size,
                "manifest_sha256": manifest_digest(fetched.entries),
                "session_id": session.session_id,
            },
            request_id=request_id,
        )
    return fetched


def manifest_digest(entries: list[ManifestEntry]) -> str:
    """One sha256 over the manifest (canonical JSON), so the audit row pins every file's hash."""
    canonical = json.dumps([e.as_json() for e in entries], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()
