"""The steps on one tagged checkpoint row that the insert batch and the poll round share.

Every record is a compare-and-swap on the row's status, audited in the same transaction,
and no transaction is held across a ZVM call: record the attempt → call → record the outcome.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from rewind.audit import Actor, AuditEntry, audit_record
from rewind.audit.actions import GuardAction
from rewind.checkpoints.announce import guard_announce_failed
from rewind.checkpoints.models import ChangeGuard, TaggedCheckpoint
from rewind.zvm import Checkpoint, ZvmAuthError, ZvmClient, ZvmError, ZvmNotFoundError, ZvmRejectedError
from rewind.zvm.clock import from_zvm, to_zvm

# How far before our insert a checkpoint or task list is asked to start: clocks and rounding.
LIST_LOOKBACK = timedelta(minutes=1)


def row_since(row: TaggedCheckpoint, offset_s: float) -> datetime:
    """The earliest time, on the ZVM's clock, our checkpoint or insert task can carry.

    The insert task's own ``Started`` once known; before that our insert time converted
    through the ZVM's clock offset (``rewind.zvm.clock``). Less a minute either way.
    """
    if row.task_started_at is not None:
        return row.task_started_at - LIST_LOOKBACK
    start = row.insert_started_at or row.guard.started_at or row.guard.requested_at
    return to_zvm(start, offset_s) - LIST_LOOKBACK


def attempt_entry(row: TaggedCheckpoint, guard: ChangeGuard, *, retry: bool) -> AuditEntry:
    """The audit event of an insert attempt (``guard.checkpoint.requested``), recorded before the call."""
    return AuditEntry(
        actor=Actor.agent(guard.agent_name),
        action=GuardAction.CHECKPOINT_REQUESTED,
        target=guard,
        request_id=guard.request_id,
        data={
            "vpg": row.vpg_name,
            "vpg_identifier": row.vpg_identifier,
            "retry": retry,
            "site": row.site.name if row.site else "",
            "tag": guard.tag,
        },
    )


@dataclass(frozen=True)
class InsertFailed:
    error: str


@dataclass(frozen=True)
class InsertAnswer:
    """What one insert call came to: its task id, a failure to end the row with, or an unknown outcome."""

    task_id: str = ""
    failed: InsertFailed | None = None
    unknown: str = ""  # the call's answer was lost (the ZVM may have acted): why


def insert_call(client: ZvmClient, row: TaggedCheckpoint, guard: ChangeGuard) -> InsertAnswer:
    """Make the insert call for a row marked "inserting" and classify the outcome. No database."""
    try:
        return InsertAnswer(task_id=client.insert_tagged_checkpoint(row.vpg_identifier, guard.tag))
    except (ZvmAuthError, ZvmNotFoundError) as exc:
        return InsertAnswer(failed=InsertFailed(str(exc)))
    except ZvmRejectedError as exc:
        return InsertAnswer(failed=InsertFailed(f"the ZVM refused the checkpoint: {exc}"))
    except ZvmError as exc:
        # The ZVM may have acted before the answer was lost: do not repeat the call; the
        # poller resolves it by the tag and the ZVM's task list.
        return InsertAnswer(unknown=f"the insert call's outcome is unknown ({exc})")


def insert_record(row_id: int, answer: InsertAnswer, **extra: Any) -> bool:
    """Record a task id (the row waits) or an unknown outcome on a row still "inserting" without one.

    ``extra``: more fields to set in the same UPDATE (the batch's next poll time). A failure
    is not recorded here: the caller ends the row with ``row_finish``. False when the row had
    moved on (another run adopted a task for it).
    """
    rows = TaggedCheckpoint.objects.filter(pk=row_id, status=TaggedCheckpoint.Status.INSERTING, task_id="")
    if answer.task_id:
        fields: dict[str, Any] = {
            "task_id": answer.task_id,
            "status": TaggedCheckpoint.Status.WAITING,
            "error": "",
            "outcome_unknown_since": None,
        }
    else:
        fields = {"error": answer.unknown[:2000], "outcome_unknown_since": timezone.now()}
    return bool(rows.update(**fields, **extra))


def row_finish(
    row_id: int,
    guard: ChangeGuard,
    status: str,
    *,
    error: str = "",
    checkpoint: Checkpoint | None = None,
    offset_s: float = 0.0,
    listed_after_ms: int | None = None,
) -> bool:
    """End a row (listed, failed or timed out) and audit it; False when it had ended already.

    ``listed_after_ms``: how long the ZVM took to list it, as far as the poller could tell
    (see ``poll_round.listing_time_ms``); what the site's pacing learns from.
    """
    row = TaggedCheckpoint.objects.get(pk=row_id)
    start = row.insert_started_at or guard.started_at or timezone.now()
    waited_ms = max(0, int((timezone.now() - start).total_seconds() * 1000))
    with transaction.atomic():
        won = TaggedCheckpoint.objects.filter(pk=row_id, status__in=TaggedCheckpoint.NOT_FINAL).update(
            status=status,
            error=error[:2000],
            checkpoint_identifier=(checkpoint.identifier or "") if checkpoint else "",
            checkpoint_timestamp=checkpoint.timestamp if checkpoint else None,
            waited_ms=waited_ms,
            listed_after_ms=listed_after_ms,
            next_poll_at=None,
        )
        if won:
            audit_record(
                actor=Actor.system(),
                action=(
                    GuardAction.CHECKPOINT_LISTED
                    if status == TaggedCheckpoint.Status.LISTED
                    else GuardAction.CHECKPOINT_FAILED
                ),
                target=guard,
                request_id=guard.request_id,
                data={
                    "vpg": row.vpg_name,
                    "vpg_identifier": row.vpg_identifier,
                    "status": status,
                    "error": error,
                    "checkpoint_identifier": checkpoint.identifier if checkpoint else None,
                    "waited_ms": waited_ms,
                    "tag": guard.tag,
                    **_clock_data(checkpoint, offset_s),
                },
            )
    return bool(won)


def _clock_data(checkpoint: Checkpoint | None, offset_s: float) -> dict[str, object]:
    """The checkpoint's time as the ZVM shows it and on our clock (the audit's), and the offset."""
    if checkpoint is None or checkpoint.timestamp is None:
        return {"clock_offset_s": round(offset_s, 3)}
    return {
        "checkpoint_timestamp": checkpoint.timestamp.isoformat(),
        "checkpoint_time_ours": from_zvm(checkpoint.timestamp, offset_s).isoformat(),
        "clock_offset_s": round(offset_s, 3),
    }


def guard_finish(guard: ChangeGuard) -> str:
    """End the guard once every row has ended: ok when all are listed. Returns what happened."""
    rows = list(TaggedCheckpoint.objects.filter(guard=guard))
    if any(r.status not in TaggedCheckpoint.FINAL for r in rows):
        return "unfinished rows remain"
    ok = all(r.status == TaggedCheckpoint.Status.LISTED for r in rows)
    status = ChangeGuard.Status.OK if ok else ChangeGuard.Status.FAILED
    listed = TaggedCheckpoint.Status.LISTED
    error = "; ".join(f"VPG {r.vpg_name}: {r.error or r.status}" for r in rows if r.status != listed)
    with transaction.atomic():
        # Unfinished, not only running: a guard failed before any batch took it up is still pending.
        won = ChangeGuard.objects.filter(pk=guard.pk, status__in=ChangeGuard.UNFINISHED).update(
            status=status, error=error[:4000], finished_at=timezone.now()
        )
        if won:
            audit_record(
                actor=Actor.system(),
                action=GuardAction.OK if ok else GuardAction.FAILED,
                target=guard,
                request_id=guard.request_id,
                data={
                    "status": status,
                    "error": error,
                    "listed": [r.vpg_name for r in rows if r.status == TaggedCheckpoint.Status.LISTED],
                    "not_listed": [r.vpg_name for r in rows if r.status != TaggedCheckpoint.Status.LISTED],
                },
            )
            if not ok:
                guard_announce_failed(guard=guard, rows=rows)
    return status
