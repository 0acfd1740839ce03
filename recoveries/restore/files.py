"""The files a restore in place writes: one for a file, every manifest file for a folder.

Each file is read as the guest holds it now, then after the guard written, read back and compared by sha256. A
folder with a file above ``REWIND_RESTORE_MAX_BYTES``, or a binary file for a text writer, is not written at
all: half a folder put back is worse than none.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings

from recoveries.archive import ManifestEntry, archive_member_open
from recoveries.models import RecoveryRequest, RestoreState
from recoveries.restore.diff import MAX_LINES, FileDiff, file_diff
from recoveries.restore.guestfile import GuestFileError, GuestFiles, encode_content, guest_files_use
from recoveries.restore.models import GuestFileTools
from rewind.lib.errors import ApplicationError

State = RestoreState
CURRENT_FOLDER = ".guest-current.d"
UNCHANGED, CHANGED, NEW = "unchanged", "changed", "new"
SKIPPED = "skipped"


@dataclass(frozen=True)
class WriteOutcome:
    """How writing one file ended: a ``RestoreState`` value, the sentence saying so, what came back."""

    state: str
    message: str
    read_back_sha256: str = ""
    # The writer was called and may have changed the file (every state but not_written).
    touched: bool = True


def read_current(tools: GuestFileTools, vm: str, path: str) -> tuple[bytes | None, str]:
    """The file in the guest now, or why it could not be read (an empty error when it was)."""
    return read_currents(tools, vm, [path])[0]


def read_currents(tools: GuestFileTools, vm: str, paths: list[str]) -> list[tuple[bytes | None, str]]:
    """Each file in the guest now, in one session, or why it could not be read; one answer per path."""
    if not tools.reader_tool:
        why = (
            f"no reader tool is configured for upstream {tools.upstream.name}: the file in the guest cannot be "
            "shown, and the write-back cannot be verified"
        )
        return [(None, why)] * len(paths)

    async def read_all(files: GuestFiles) -> list[tuple[bytes | None, str]]:
        out: list[tuple[bytes | None, str]] = []
        for path in paths:
            try:
                out.append((await files.read(vm, path), ""))
            except GuestFileError as exc:
                out.append((None, f"the file in the guest could not be read: {exc.message}"))
        return out

    return guest_files_use(tools, read_all)


def write_one(
    tools: GuestFileTools, vm: str, path: str, data: bytes, *, before_sha256: str, size: int, sha256: str
) -> WriteOutcome:
    """Write ``data`` at ``path``, read it back, and let sha256 decide; every failure says what the guest holds."""
    written: dict[str, bool] = {"done": False}

    async def write_and_read(files: GuestFiles) -> bytes | None:
        await files.write(vm, path, data)
        written["done"] = True
        return await files.read(vm, path) if tools.reader_tool else None

    try:
        back = guest_files_use(tools, write_and_read)
    except GuestFileError as exc:
        if written["done"]:
            return WriteOutcome(State.FAILED, f"written, but it could not be read back to verify it: {exc.message}")
        if not exc.may_have_run:
            return WriteOutcome(State.NOT_WRITTEN, f"not written: {exc.message}", touched=False)
        return WriteOutcome(State.FAILED, _failed_write(tools, vm, path, exc, before_sha256, sha256))
    if back is None:
        return WriteOutcome(State.FAILED, "written, not verified: no reader tool is configured to read it back")
    got = hashlib.sha256(back).hexdigest()
    if got == sha256:
        return WriteOutcome(State.VERIFIED, "verified", got)
    why = (
        f"differs: the guest gives back {len(back)} bytes with sha256 {got}, not the checkpoint's "
        f"{size} bytes with sha256 {sha256}"
    )
    return WriteOutcome(State.DIFFERS, why, got)


def _failed_write(
    tools: GuestFileTools, vm: str, path: str, exc: GuestFileError, before_sha256: str, sha256: str
) -> str:
    """A write that failed on the way: what the guest holds now, when the reader can tell."""
    said = f"the write failed: {exc.message}; the file may be partly written"
    if not tools.reader_tool:
        return said
    try:
        now = guest_files_use(tools, lambda files: files.read(vm, path))
    except GuestFileError as read_error:
        return f"{said} (it could not be read afterwards: {read_error.message})"
    digest = hashlib.sha256(now).hexdigest()
    if digest == before_sha256:
        return f"the write failed: {exc.message}; the guest still holds the file as it was before"
    if digest == sha256:
        return f"the writer reported an error ({exc.message}), yet the guest holds the checkpoint's bytes"
    return (
        f"{said}: the guest now holds {len(now)} bytes with sha256 {digest}, neither the old file nor the checkpoint's"
    )


# -- a folder ------------------------------------------------------------------------------------------


def folder_entries(recovery: RecoveryRequest) -> list[ManifestEntry]:
    return [ManifestEntry.from_json(raw) for raw in recovery.manifest]


def folder_guest_path(recovery: RecoveryRequest, rel: str) -> str:
    """Where a manifest file sits in the guest, written as the agent wrote the folder."""
    if recovery.os == RecoveryRequest.Os.WINDOWS:
        return recovery.path.rstrip("\\/") + "\\" + rel.replace("/", "\\")
    return recovery.path.rstrip("/") + "/" + rel


def folder_recovered(recovery: RecoveryRequest, entry: ManifestEntry) -> bytes:
    with archive_member_open(Path(recovery.stored_path), entry) as member:
        return member.read()


def folder_refusal(recovery: RecoveryRequest, tools: GuestFileTools) -> str | None:
    """Why the folder cannot be written back at all (every file it concerns named); None when it can."""
    limit = settings.REWIND_RESTORE_MAX_BYTES
    large = [e.path for e in folder_entries(recovery) if e.size > limit]
    if large:
        return (
            f"{_some(large)} {'is' if len(large) == 1 else 'are'} above the in-place limit of {limit} bytes per file "
            "(REWIND_RESTORE_MAX_BYTES), so no file of the folder is written"
        )
    binary = []
    for entry in folder_entries(recovery):
        try:
            encode_content(tools, folder_recovered(recovery, entry))
        except ApplicationError:
            binary.append(entry.path)
    if binary:
        return (
            f"{_some(binary)} {'is' if len(binary) == 1 else 'are'} not UTF-8 text and the writer of upstream "
            f"{tools.upstream.name} takes text: configure base64 for it to restore binary files; no file of the "
            "folder is written"
        )
    return None


def _some(paths: list[str], shown: int = 5) -> str:
    named = ", ".join(paths[:shown])
    return named + (f" and {len(paths) - shown} more" if len(paths) > shown else "")


def _current_dir(recovery: RecoveryRequest) -> Path:
    return Path(settings.REWIND_STORAGE_DIR) / str(recovery.pk) / CURRENT_FOLDER


def folder_compare(recovery: RecoveryRequest, tools: GuestFileTools) -> list[dict[str, Any]]:
    """Read every manifest file in the guest now, kept for the diff; one the guest cannot give is ``new``, its
    reason kept: the write-back creates it."""
    keep = _current_dir(recovery)
    keep.mkdir(parents=True, exist_ok=True)
    entries = folder_entries(recovery)
    paths = [folder_guest_path(recovery, entry.path) for entry in entries]
    files = []
    for index, (entry, guest_path, (current, error)) in enumerate(
        zip(entries, paths, read_currents(tools, recovery.vm_name, paths), strict=True)
    ):
        row: dict[str, Any] = {
            "path": entry.path,
            "guest_path": guest_path,
            "change": NEW,
            "current_sha256": "",
            "current_size": None,
            "current_error": error,
            "result": "",
            "message": "",
            "read_back_sha256": "",
        }
        if current is not None:
            (keep / str(index)).write_bytes(current)
            digest = hashlib.sha256(current).hexdigest()
            row.update(
                change=UNCHANGED if digest == entry.sha256 else CHANGED,
                current_sha256=digest,
                current_size=len(current),
            )
        files.append(row)
    return files


def folder_compared_digest(files: list[dict[str, Any]]) -> str:
    """One sha256 over what the guest held, file by file: the folder's ``current_sha256`` (the diff token's)."""
    seen = "\n".join(f"{f['path']}|{f['current_sha256']}|{f['current_error']}" for f in files)
    return hashlib.sha256(seen.encode()).hexdigest()


@dataclass(frozen=True)
class FolderFileDiff:
    path: str
    change: str
    current_error: str
    diff: FileDiff | None  # None once the page's line budget is spent (sizes and sha256 are in the row)
    recovered_size: int
    recovered_sha256: str
    current_size: int | None
    current_sha256: str


def folder_diffs(recovery: RecoveryRequest) -> list[FolderFileDiff]:
    """The per-file summary for the approval page; a unified diff per changed or new text file, bounded in all."""
    entries = {e.path: e for e in folder_entries(recovery)}
    budget = MAX_LINES
    out = []
    for index, row in enumerate(recovery.restore_files):
        entry = entries[row["path"]]
        diff = None
        if row["change"] != UNCHANGED and budget > 0:
            current_file = _current_dir(recovery) / str(index)
            current = current_file.read_bytes() if row["current_sha256"] and current_file.is_file() else None
            name = row["guest_path"]
            diff = file_diff(
                current,
                folder_recovered(recovery, entry),
                current_name=f"{name} now",
                recovered_name=f"{name} at checkpoint",
            )
            budget -= len(diff.lines)
        out.append(
            FolderFileDiff(
                path=row["path"],
                change=row["change"],
                current_error=row["current_error"],
                diff=diff,
                recovered_size=entry.size,
                recovered_sha256=entry.sha256,
                current_size=row["current_size"],
                current_sha256=row["current_sha256"],
            )
        )
    return out


def folder_summary(files: list[dict[str, Any]]) -> tuple[str, str]:
    """The folder's overall state and sentence from its files' results: ``verified`` only when every file written
    was verified and none was left unwritten."""
    results = [f["result"] for f in files]
    written = [f for f in files if f["result"] in (State.VERIFIED, State.DIFFERS, State.FAILED)]
    skipped = results.count(SKIPPED)
    verified = results.count(State.VERIFIED)
    counts = f"{verified} of {len(written)} written verified, {skipped} unchanged and not written"
    if State.FAILED in results:
        state = State.FAILED
    elif State.DIFFERS in results:
        state = State.DIFFERS
    elif State.NOT_WRITTEN in results or "" in results:
        state = State.NOT_WRITTEN if not written else State.FAILED
    else:
        state = State.VERIFIED
    if state == State.VERIFIED:
        return state, f"verified: {counts}"
    failing = [f"{f['path']}: {f['message']}" for f in files if f["result"] in (State.FAILED, State.DIFFERS)]
    unwritten = [f["path"] for f in files if f["result"] in (State.NOT_WRITTEN, "")]
    said = [counts]
    if written:
        said.append("written: " + ", ".join(f["path"] for f in written))
    if unwritten:
        said.append("not written: " + ", ".join(unwritten))
    said.extend(failing)
    return state, f"{state.replace('_', ' ')}: " + "; ".join(said)
