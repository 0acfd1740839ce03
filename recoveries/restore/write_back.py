"""Restore in place, the write-back: guard, write, read back, verify (docs/restore.md).

The upstream is pinged first (down: nothing written, no checkpoint spent), then the guard takes a tagged
checkpoint through the gateway's own service (change id ``restore-<id>``, so the write-back can be undone too).
Nothing is written before the guard is ok, and a write under way is never started again: one whose worker died
is read back and ended by the beat's sweep.
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from recoveries.models import RecoveryRequest, RestoreState
from recoveries.restore.files import (
    SKIPPED,
    UNCHANGED,
    folder_entries,
    folder_recovered,
    folder_summary,
    write_one,
)
from recoveries.restore.guest_tools import guest_file_tools_for
from recoveries.restore.guestfile import GuestFileError, guest_files_use
from recoveries.restore.models import GuestFileTools
from recoveries.restore.services import restore_change_id, restore_finish, restore_recovered, write_back_queue
from rewind.audit import SYSTEM, audit_record
from rewind.audit.actions import RecoveryAction
from rewind.checkpoints.models import ChangeGuard
from rewind.checkpoints.services import guard_create, guard_read_and_resume
from rewind.lib.errors import ApplicationError

logger = logging.getLogger(__name__)
Status = RecoveryRequest.Status
State = RestoreState
# How often the write-back task looks at its guard again while the guard runs.
GUARD_POLL_S = 1.0


def restore_write_back_step(*, recovery_id: int, request_id: str) -> str:
    """One step of the write-back; queues the next while its guard runs. Returns the restore state."""
    recovery = RecoveryRequest.objects.filter(pk=recovery_id).first()
    if recovery is None or recovery.status != Status.RESTORING:
        return recovery.restore_state if recovery is not None else "gone"
    try:
        if recovery.restore_state == State.GUARDING:
            return _guard_step(recovery, request_id)
    except Exception as exc:
        logger.exception("the write-back of recovery %s failed unexpectedly", recovery_id)
        recovery.refresh_from_db()
        if recovery.restore_state == State.WRITING:  # the bytes may have gone out
            if recovery.recursive:
                said = _folder_broke_off(recovery, f"internal error during its write ({type(exc).__name__})")
                return restore_finish(recovery, State.FAILED, said, request_id)
            why = f"internal error during the write ({type(exc).__name__}); the file may be partly written"
            return restore_finish(recovery, State.FAILED, why, request_id)
        return restore_finish(
            recovery, State.NOT_WRITTEN, f"not written: internal error ({type(exc).__name__})", request_id
        )
    return recovery.restore_state


def _tools_or_finish(recovery: RecoveryRequest, request_id: str) -> GuestFileTools | None:
    tools = guest_file_tools_for(vm_name=recovery.vm_name, os=recovery.os)
    if tools is None:
        why = f"not written: no tool is configured any more to write a file into {recovery.vm_name} ({recovery.os})"
        restore_finish(recovery, State.NOT_WRITTEN, why, request_id)
    return tools


def _guard_step(recovery: RecoveryRequest, request_id: str) -> str:
    tools = _tools_or_finish(recovery, request_id)
    if tools is None:
        return State.NOT_WRITTEN
    if recovery.restore_guard_id is None:
        return _guard_start(recovery, tools, request_id)
    guard = guard_read_and_resume(recovery.restore_guard_id)
    if guard.status in ChangeGuard.UNFINISHED:
        _next_step(recovery, request_id)
        return State.GUARDING
    if guard.status != ChangeGuard.Status.OK:
        why = guard.error or "its checkpoint was not listed in time"
        restore_finish(
            recovery, State.NOT_WRITTEN, f"not written: the guard before the write-back failed: {why}", request_id
        )
        return State.NOT_WRITTEN
    # The write's start is stamped: a write silent too long after it is one whose worker died.
    started = timezone.now()
    won = RecoveryRequest.objects.filter(pk=recovery.pk, restore_state=State.GUARDING).update(
        restore_state=State.WRITING, restore_step_at=started
    )
    if not won:
        return str(RecoveryRequest.objects.get(pk=recovery.pk).restore_state)
    return _write(recovery, tools, request_id, started)


def _guard_start(recovery: RecoveryRequest, tools: GuestFileTools, request_id: str) -> str:
    """Ask the upstream first (a down one costs no checkpoint), then start the guard."""
    try:
        guest_files_use(tools, lambda files: files.ready())
    except GuestFileError as exc:
        why = f"not written and no checkpoint taken: {exc.message}"
        restore_finish(recovery, State.NOT_WRITTEN, why, request_id)
        return State.NOT_WRITTEN
    try:
        outcome = guard_create(
            # A person's request is guarded in their name: the tag says who the write-back is for.
            agent_name=(recovery.agent_name or recovery.requested_by_name)[:64],
            agent_id=recovery.agent_id,
            vm=recovery.vm_identifier,
            action=f"write back {_what(recovery)} (recovery #{recovery.pk})",
            change_id=restore_change_id(recovery),
            tool=f"{tools.upstream.name}/{tools.writer_tool}",
            request_id=request_id,
        )
    except ApplicationError as exc:
        restore_finish(recovery, State.NOT_WRITTEN, f"not written: the guard was refused: {exc.message}", request_id)
        return State.NOT_WRITTEN
    if outcome.guard is None:
        why = outcome.refusal or "no checkpoint could be taken"
        restore_finish(recovery, State.NOT_WRITTEN, f"not written: the guard was refused: {why}", request_id)
        return State.NOT_WRITTEN
    with transaction.atomic():
        RecoveryRequest.objects.filter(pk=recovery.pk).update(restore_guard=outcome.guard)
        audit_record(
            actor=SYSTEM,
            action=RecoveryAction.RESTORE_GUARDED,
            target=recovery,
            data={"guard": outcome.guard.pk, "change_id": outcome.guard.change_id, "tag": outcome.guard.tag},
            request_id=request_id,
        )
    _next_step(recovery, request_id)
    return State.GUARDING


def _what(recovery: RecoveryRequest) -> str:
    if recovery.recursive:
        return f"the files of folder {recovery.file_name}"
    return recovery.file_name


def _next_step(recovery: RecoveryRequest, request_id: str) -> None:
    RecoveryRequest.objects.filter(pk=recovery.pk).update(restore_step_at=timezone.now())
    write_back_queue(recovery.pk, request_id, countdown=GUARD_POLL_S)


def _write(recovery: RecoveryRequest, tools: GuestFileTools, request_id: str, started: datetime) -> str:
    if recovery.recursive:
        return _write_folder(recovery, tools, request_id, started)
    outcome = write_one(
        tools,
        recovery.vm_name,
        recovery.path,
        restore_recovered(recovery),
        before_sha256=recovery.current_sha256,
        size=recovery.size or 0,
        sha256=recovery.sha256,
    )
    return restore_finish(recovery, outcome.state, outcome.message, request_id, written=outcome.read_back_sha256)


def _write_folder(recovery: RecoveryRequest, tools: GuestFileTools, request_id: str, stamp: datetime) -> str:
    """Write each changed or new file in manifest order, each read back and verified; the unchanged are skipped,
    and the first file not fully written stops the rest. Each result is saved as soon as known; each write is
    stamped first, and a stamp no longer ours means the sweep took this write-back for dead."""
    files = [dict(row) for row in recovery.restore_files]
    entries = {entry.path: entry for entry in folder_entries(recovery)}
    stopped_at = ""
    for row in files:
        if row["change"] == UNCHANGED:
            row.update(result=SKIPPED, message="unchanged: the guest already holds the checkpoint's bytes; not written")
        elif stopped_at:
            row.update(result=State.NOT_WRITTEN, message=f"not written: the write-back stopped at {stopped_at}")
        else:
            fresh = _stamp_again(recovery, stamp)
            if fresh is None:
                logger.warning(
                    "recovery %s: the write-back was taken for dead; %s is not written", recovery.pk, row["path"]
                )
                return State.WRITING
            stamp = fresh
            entry = entries[row["path"]]
            outcome = write_one(
                tools,
                recovery.vm_name,
                row["guest_path"],
                folder_recovered(recovery, entry),
                before_sha256=row["current_sha256"],
                size=entry.size,
                sha256=entry.sha256,
            )
            row.update(result=outcome.state, message=outcome.message, read_back_sha256=outcome.read_back_sha256)
            if outcome.state in (State.FAILED, State.NOT_WRITTEN):
                stopped_at = row["path"]
        RecoveryRequest.objects.filter(pk=recovery.pk).update(restore_files=files)
    state, message = folder_summary(files)
    return restore_finish(recovery, state, message, request_id)


def _stamp_again(recovery: RecoveryRequest, stamp: datetime) -> datetime | None:
    """Stamp the next file's write, if the last stamp is still ours; None when the sweep took it."""
    now = timezone.now()
    kept = RecoveryRequest.objects.filter(pk=recovery.pk, restore_state=State.WRITING, restore_step_at=stamp).update(
        restore_step_at=now
    )
    return now if kept else None


def _folder_broke_off(recovery: RecoveryRequest, why: str) -> str:
    """An unexpected error during a folder's write: the file under way may be partly written, the rest are not."""
    files = [dict(row) for row in recovery.restore_files]
    pending = [row for row in files if not row["result"]]
    for number, row in enumerate(pending):
        if number == 0:
            row.update(result=State.FAILED, message=f"{why}; it may be partly written")
        else:
            row.update(result=State.NOT_WRITTEN, message="not written: the write-back broke off before it")
    RecoveryRequest.objects.filter(pk=recovery.pk).update(restore_files=files)
    recovery.restore_files = files
    return folder_summary(files)[1]
