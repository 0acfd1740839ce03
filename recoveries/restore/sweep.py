"""The beat's sweep of restores in place (``recoveries.restore``): the steps whose worker or message was lost.

A pulled file never compared is compared; a guard step that fell silent is queued again; a write
whose worker died mid-write is read back (never written again) and ended by what the guest holds.
"""

from __future__ import annotations

import hashlib
import logging
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from recoveries.models import RecoveryRequest, RestoreState
from recoveries.restore.files import (
    SKIPPED,
    UNCHANGED,
    WriteOutcome,
    folder_entries,
    folder_summary,
    read_current,
)
from recoveries.restore.guest_tools import guest_file_tools_for
from recoveries.restore.guestfile import CALL_GRACE_S
from recoveries.restore.models import GuestFileTools
from recoveries.restore.services import restore_change_id, restore_compare, restore_finish, write_back_queue
from rewind.gateway.services import CALL_TIMEOUT_RANGE, CONNECT_TIMEOUT_RANGE

logger = logging.getLogger(__name__)
Status = RecoveryRequest.Status
State = RestoreState

# A step queues the next within a second while its guard runs; silence this long means its message was lost.
STALLED_AFTER = timedelta(minutes=2)
# A write stamps ``restore_step_at`` as it starts, and per file for a folder; one file's write and
# read-back through the upstream end within ``_one_file_bound``. Silence this much longer than that
# means the worker died mid-write: the sweep reads the file back and ends the write-back.
WRITE_STALLED_AFTER = timedelta(minutes=2)


def restores_resume_stalled(*, now: datetime | None = None) -> int:
    """The beat's sweep: compare the pulled files never compared, queue again the write-backs whose guard step fell
    silent, and end the writes whose worker died; how many. Safe to overlap and to repeat: a write under way
    (``writing``) is never queued again, since it may have written."""
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
    """End each write-back silent in ``writing`` past its bound, never writing again: the file under way is read
    back, and what the guest holds decides; how many. A sweep takes one by a compare-and-swap on its
    ``restore_step_at`` stamp, so two sweeps never both read it back."""
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
