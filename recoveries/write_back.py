"""Restore in place, the write-back (``recoveries.restore`` step 3): guard, write, read back, verify.

A task step, queued again while its guard runs (``restore_step_at`` says when a step last ran):
the upstream is asked for a ping first (down: nothing written, no checkpoint spent), then a guard
takes a tagged checkpoint through the same service the gateway uses (change id ``restore-<id>``,
so the write-back can in turn be undone), then the writer writes, the reader reads back, and
sha256 decides. Nothing is written into a guest before its guard is ok, and a write under way is
never started again.
"""

from __future__ import annotations

import hashlib
import logging
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from recoveries.guestfile import GuestFileError, GuestFiles, guest_files_use
from recoveries.models import RecoveryRequest, RestoreState
from recoveries.restore import restore_change_id, restore_compare, restore_finish, restore_recovered, write_back_queue
from recoveries.restore_models import GuestFileTools
from recoveries.restore_tools import guest_file_tools_for
from rewind.audit import SYSTEM, audit_record
from rewind.audit.actions import RecoveryAction
from rewind.checkpoints.models import ChangeGuard
from rewind.checkpoints.services import guard_create, guard_read_and_resume
from rewind.errors import ApplicationError

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
    won = RecoveryRequest.objects.filter(pk=recovery.pk, restore_state=State.GUARDING).update(
        restore_state=State.WRITING
    )
    if not won:
        return str(RecoveryRequest.objects.get(pk=recovery.pk).restore_state)
    return _write(recovery, tools, request_id)


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
            agent_name=recovery.agent_name,
            agent_id=recovery.agent_id,
            vm=recovery.vm_identifier,
            action=f"write back {recovery.file_name} (recovery #{recovery.pk})",
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


def _next_step(recovery: RecoveryRequest, request_id: str) -> None:
    RecoveryRequest.objects.filter(pk=recovery.pk).update(restore_step_at=timezone.now())
    write_back_queue(recovery.pk, request_id, countdown=GUARD_POLL_S)


def _write(recovery: RecoveryRequest, tools: GuestFileTools, request_id: str) -> str:
    data = restore_recovered(recovery)
    vm, path = recovery.vm_name, recovery.path
    written: dict[str, bool] = {"done": False}

    async def write_and_read(files: GuestFiles) -> bytes | None:
        await files.write(vm, path, data)
        written["done"] = True
        return await files.read(vm, path) if tools.reader_tool else None

    try:
        back = guest_files_use(tools, write_and_read)
    except GuestFileError as exc:
        if written["done"]:
            why = f"written, but it could not be read back to verify it: {exc.message}"
            return restore_finish(recovery, State.FAILED, why, request_id)
        if not exc.may_have_run:
            return restore_finish(recovery, State.NOT_WRITTEN, f"not written: {exc.message}", request_id)
        return restore_finish(recovery, State.FAILED, _failed_write(recovery, tools, exc), request_id)
    if back is None:
        why = "written, not verified: no reader tool is configured to read it back"
        return restore_finish(recovery, State.FAILED, why, request_id)
    got = hashlib.sha256(back).hexdigest()
    if got == recovery.sha256:
        return restore_finish(recovery, State.VERIFIED, "verified", request_id, written=got)
    why = (
        f"differs: the guest gives back {len(back)} bytes with sha256 {got}, not the checkpoint's "
        f"{recovery.size} bytes with sha256 {recovery.sha256}"
    )
    return restore_finish(recovery, State.DIFFERS, why, request_id, written=got)


def _failed_write(recovery: RecoveryRequest, tools: GuestFileTools, exc: GuestFileError) -> str:
    """A write that failed on the way: what the guest holds now, when the reader can tell."""
    said = f"the write failed: {exc.message}; the file may be partly written"
    if not tools.reader_tool:
        return said
    try:
        now = guest_files_use(tools, lambda files: files.read(recovery.vm_name, recovery.path))
    except GuestFileError as read_error:
        return f"{said} (it could not be read afterwards: {read_error.message})"
    digest = hashlib.sha256(now).hexdigest()
    if digest == recovery.current_sha256:
        return f"the write failed: {exc.message}; the guest still holds the file as it was before"
    if digest == recovery.sha256:
        return f"the writer reported an error ({exc.message}), yet the guest holds the checkpoint's bytes"
    return (
        f"{said}: the guest now holds {len(now)} bytes with sha256 {digest}, neither the old file nor the checkpoint's"
    )


# -- a step whose message was lost ---------------------------------------------------------------------

# A step queues the next within a second while its guard runs; silence this long means its message was lost.
STALLED_AFTER = timedelta(minutes=2)


def restores_resume_stalled(*, now: datetime | None = None) -> int:
    """The beat's sweep: compare again the pulled files never compared (the run's worker died after
    the pull), and queue again the write-backs whose guard step fell silent (a lost message). How many.

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
    return len(compare) + len(silent)
