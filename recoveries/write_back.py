"""Restore in place, the write-back (``recoveries.restore`` step 3): guard, write, read back, verify.

A task step, queued again while its guard runs (``restore_step_at`` says when a step last ran):
the upstream is asked for a ping first (down: nothing written, no checkpoint spent), then a guard
takes a tagged checkpoint through the same service the gateway uses (change id ``restore-<id>``,
so the write-back can in turn be undone), then the writer writes, the reader reads back, and
sha256 decides. Nothing is written into a guest before its guard is ok, and a write under way is
never started again: a write whose worker died is read back and ended by the beat's sweep
(``restores_end_dead_writes``).
"""

from __future__ import annotations

import hashlib
import logging
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from recoveries.guestfile import CALL_GRACE_S, GuestFileError, guest_files_use
from recoveries.models import RecoveryRequest, RestoreState
from recoveries.restore import restore_change_id, restore_compare, restore_finish, restore_recovered, write_back_queue
from recoveries.restore_files import (
    SKIPPED,
    UNCHANGED,
    WriteOutcome,
    folder_entries,
    folder_recovered,
    folder_summary,
    read_current,
    write_one,
)
from recoveries.restore_models import GuestFileTools
from recoveries.restore_tools import guest_file_tools_for
from rewind.audit import SYSTEM, audit_record
from rewind.audit.actions import RecoveryAction
from rewind.checkpoints.models import ChangeGuard
from rewind.checkpoints.services import guard_create, guard_read_and_resume
from rewind.errors import ApplicationError
from rewind.gateway.services import CALL_TIMEOUT_RANGE, CONNECT_TIMEOUT_RANGE

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
    """Write each changed or new file in manifest order, each read back and verified; the unchanged are skipped.

    The first file not (fully) written stops the rest, which are then not written; every file's
    result is saved as soon as it is known, so what the guest got is known even if this step dies.
    Each write is stamped first; a stamp that is not ours any more means the sweep took this
    write-back for dead and ends it, so nothing more is written.
    """
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


# -- a step whose message was lost, a write whose worker died ------------------------------------------

# A step queues the next within a second while its guard runs; silence this long means its message was lost.
STALLED_AFTER = timedelta(minutes=2)
# A write stamps ``restore_step_at`` as it starts, and per file for a folder; one file's write and
# read-back through the upstream end within ``_one_file_bound``. Silence this much longer than that
# means the worker died mid-write: the sweep reads the file back and ends the write-back.
WRITE_STALLED_AFTER = timedelta(minutes=2)


def restores_resume_stalled(*, now: datetime | None = None) -> int:
    """The beat's sweep: compare again the pulled files never compared (the run's worker died after
    the pull), queue again the write-backs whose guard step fell silent (a lost message), and end
    the writes whose worker died (``restores_end_dead_writes``). How many.

    Safe to overlap and to repeat: every step is a compare-and-swap on ``restore_state``; a write
    already under way (``writing``) is never queued again, since it may have written.
    """
    now = now or timezone.now()
    before = now - STALLED_AFTER
    compare = RecoveryRequest.objects.filter(
        status=Status.CONFIRM, restore_state=State.COMPARING, finished_at__lt=before
    ).values_list("pk", "request_id")[:50]
    for pk, rid in compare:
        restore_compare(recovery_id=pk, request_id=rid)
    silent = list(
        RecoveryRequest.objects.filter(
            status=Status.RESTORING, restore_state=State.GUARDING, restore_step_at__lt=before
        ).values_list("pk", "request_id")[:200]
    )
    for pk, rid in silent:
        if RecoveryRequest.objects.filter(pk=pk, restore_step_at__lt=before).update(restore_step_at=now):
            write_back_queue(pk, rid)
    return len(compare) + len(silent) + restores_end_dead_writes(now=now)


def restores_end_dead_writes(*, now: datetime | None = None) -> int:
    """End each write-back silent in ``writing`` past its bound, never writing again: the file under
    way is read back through the reader, and what the guest holds decides. How many it ended.

    A sweep takes a write-back by stamping ``restore_step_at`` (a compare-and-swap on the stamp it
    saw), so two sweeps never both read it back; ``restore_finish`` from ``writing`` ends it once.
    """
    now = now or timezone.now()
    seen = list(
        RecoveryRequest.objects.filter(
            status=Status.RESTORING, restore_state=State.WRITING, restore_step_at__lt=now - WRITE_STALLED_AFTER
        )[:50]
    )
    ended = 0
    for recovery in seen:
        tools = guest_file_tools_for(vm_name=recovery.vm_name, os=recovery.os)
        assert recovery.restore_step_at is not None
        if now - recovery.restore_step_at <= WRITE_STALLED_AFTER + _one_file_bound(tools):
            continue
        taken = RecoveryRequest.objects.filter(
            pk=recovery.pk, restore_state=State.WRITING, restore_step_at=recovery.restore_step_at
        ).update(restore_step_at=now)
        if taken and _end_dead_write(recovery, tools):
            ended += 1
    return ended


def _one_file_bound(tools: GuestFileTools | None) -> timedelta:
    """The longest a live worker stays silent on one file: two sessions opened, a write and two reads
    (the read-back, and the look after a failed write), each call within its upstream's bound."""
    if tools is None:  # the tools are gone: the bound of any upstream
        connect, call = CONNECT_TIMEOUT_RANGE[1], CALL_TIMEOUT_RANGE[1]
    else:
        connect, call = tools.upstream.connect_timeout_s, tools.upstream.call_timeout_s
    return timedelta(seconds=2 * connect + 3 * (call + CALL_GRACE_S))


def _end_dead_write(recovery: RecoveryRequest, tools: GuestFileTools | None) -> bool:
    logger.warning(
        "recovery %s: the write-back's worker died mid-write; reading back what the guest holds", recovery.pk
    )
    rid = recovery.request_id
    if recovery.recursive:
        return _end_dead_folder_write(recovery, tools, rid)
    outcome = _read_back_after_death(
        recovery, tools, recovery.path, before_sha256=recovery.current_sha256, sha256=recovery.sha256
    )
    return bool(
        restore_finish(
            recovery,
            outcome.state,
            outcome.message + _undo_hint(recovery, outcome.state),
            rid,
            written=outcome.read_back_sha256,
            from_state=State.WRITING,
        )
    )


def _end_dead_folder_write(recovery: RecoveryRequest, tools: GuestFileTools | None, request_id: str) -> bool:
    """The files already resulted keep their results; the file under way is read back; the rest are not written."""
    files = [dict(row) for row in recovery.restore_files]
    entries = {entry.path: entry for entry in folder_entries(recovery)}
    pending = [row for row in files if not row["result"]]
    # The worker saves each file's result before the next starts: only the first pending file can
    # have been under way, and an unchanged one never is (it is skipped, not written).
    under_way = pending[0] if pending and pending[0]["change"] != UNCHANGED else None
    for row in pending:
        if row is under_way:
            outcome = _read_back_after_death(
                recovery,
                tools,
                row["guest_path"],
                before_sha256=row["current_sha256"],
                sha256=entries[row["path"]].sha256,
            )
            row.update(result=outcome.state, message=outcome.message, read_back_sha256=outcome.read_back_sha256)
        elif row["change"] == UNCHANGED:
            row.update(result=SKIPPED, message="unchanged: the guest already holds the checkpoint's bytes; not written")
        else:
            row.update(result=State.NOT_WRITTEN, message="not written: the write-back's worker died before it")
    state, message = folder_summary(files)
    if under_way is not None:
        message += f"; the write-back's worker died while writing {under_way['path']}, which was read back"
    with transaction.atomic():
        if not RecoveryRequest.objects.filter(pk=recovery.pk, restore_state=State.WRITING).update(restore_files=files):
            return False
        return bool(
            restore_finish(recovery, state, message + _undo_hint(recovery, state), request_id, from_state=State.WRITING)
        )


def _read_back_after_death(
    recovery: RecoveryRequest, tools: GuestFileTools | None, path: str, *, before_sha256: str, sha256: str
) -> WriteOutcome:
    """What the guest holds of one file whose write's worker died: read back, never written again."""
    if tools is None:
        got, error = None, f"no tool is configured any more to read a file in {recovery.vm_name} ({recovery.os})"
    else:
        got, error = read_current(tools, recovery.vm_name, path)
    if got is None:
        return WriteOutcome(
            State.FAILED,
            f"the worker died during the write, and the file could not be read back ({error}): "
            "the guest may hold it partly written",
        )
    digest = hashlib.sha256(got).hexdigest()
    if digest == sha256:
        return WriteOutcome(
            State.VERIFIED,
            "verified: the worker died after writing, and the read-back matched the checkpoint's bytes",
            digest,
        )
    if before_sha256 and digest == before_sha256:
        return WriteOutcome(
            State.NOT_WRITTEN,
            "not written: the worker died before the write reached the guest; the guest still holds the file as it was",
            digest,
            touched=False,
        )
    return WriteOutcome(
        State.FAILED,
        f"the worker died during the write: the guest now holds {len(got)} bytes with sha256 {digest}, neither "
        "the old file nor the checkpoint's; it may be partly written",
        digest,
    )


def _undo_hint(recovery: RecoveryRequest, state: str) -> str:
    if state != State.FAILED:
        return ""
    change_id = restore_change_id(recovery)
    return f'; undo the write-back with zerto_recover_file(change_id="{change_id}")'
