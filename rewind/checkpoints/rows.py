"""The steps on one tagged checkpoint row that the insert batch and the poll round share.

Every record is a compare-and-swap on the row's status, audited in the same transaction,
and no transaction is held across a ZVM call: record the attempt → call → record the outcome.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from rewind.audit import Actor, AuditEntry, audit_append
from rewind.audit.actions import GuardAction
from rewind.checkpoints.announce import guard_announce_failed
from rewind.checkpoints.models import ChangeGuard, TaggedCheckpoint
from rewind.lib.bulk import update_rows
from rewind.zvm import Checkpoint, ZvmAuthError, ZvmClient, ZvmError, ZvmNotFoundError, ZvmRejectedError
from rewind.zvm.clock import from_zvm, to_zvm

# How far before our insert a checkpoint or task list is asked to start: clocks and rounding.
LIST_LOOKBACK = timedelta(minutes=1)


def row_since(row: TaggedCheckpoint, offset_s: float) -> datetime:
    """The earliest time, on the ZVM's clock, our checkpoint or insert task can carry: the task's own ``Started``
    once known, else our insert time through the ZVM's clock offset; less a minute either way."""
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


def rows_save(
    rows: Sequence[TaggedCheckpoint], fields: Sequence[str], *, was: str | None = None
) -> list[TaggedCheckpoint]:
    """Write ``fields`` of the rows still in status ``was`` (default: the one each holds in memory) in one
    statement; those written. A compare-and-swap: a row another run moved on meanwhile is left as it is."""
    if not rows:
        return []
    with transaction.atomic():
        now_in = dict(
            TaggedCheckpoint.objects.select_for_update().filter(pk__in=[r.pk for r in rows]).values_list("pk", "status")
        )
        same = [r for r in rows if now_in.get(r.pk) == (was or r.status)]
        if same:
            update_rows(same, fields)
    return same


@dataclass(frozen=True)
class RowEnd:
    """How one row ends: listed, failed or timed out, why, and for a listed one its checkpoint; ``listed_after_ms``
    is what the site's pacing learns from (``poll_round.listing_time_ms``)."""

    row: TaggedCheckpoint
    status: str
    error: str = ""
    checkpoint: Checkpoint | None = None
    offset_s: float = 0.0
    listed_after_ms: int | None = None


# The columns ``rows_finish`` writes.
_END_FIELDS = (
    "status",
    "error",
    "checkpoint_identifier",
    "checkpoint_timestamp",
    "waited_ms",
    "listed_after_ms",
    "next_poll_at",
)


def rows_finish(ends: Sequence[RowEnd]) -> list[RowEnd]:
    """End rows, each audited, all in one transaction (one statement and one audit append, however many); the ends
    made here. A compare-and-swap: a row that ended meanwhile is left as it is, and the first end given for a
    row wins."""
    first: dict[int, RowEnd] = {}
    for end in ends:
        first.setdefault(end.row.pk, end)
    if not first:
        return []
    now = timezone.now()
    with transaction.atomic():
        still_open = set(
            TaggedCheckpoint.objects.select_for_update()
            .filter(pk__in=list(first), status__in=TaggedCheckpoint.NOT_FINAL)
            .values_list("pk", flat=True)
        )
        won = [end for pk, end in first.items() if pk in still_open]
        if won:
            for end in won:
                _apply_end(end, now)
            update_rows([end.row for end in won], _END_FIELDS)
            audit_append([_end_entry(end) for end in won])
    return won


def _apply_end(end: RowEnd, now: datetime) -> None:
    row, checkpoint = end.row, end.checkpoint
    start = row.insert_started_at or row.guard.started_at or now
    row.status = end.status
    row.error = end.error[:2000]
    row.checkpoint_identifier = (checkpoint.identifier or "") if checkpoint else ""
    row.checkpoint_timestamp = checkpoint.timestamp if checkpoint else None
    row.waited_ms = max(0, int((now - start).total_seconds() * 1000))
    row.listed_after_ms = end.listed_after_ms
    row.next_poll_at = None


def _end_entry(end: RowEnd) -> AuditEntry:
    row, guard, checkpoint = end.row, end.row.guard, end.checkpoint
    return AuditEntry(
        actor=Actor.system(),
        action=GuardAction.CHECKPOINT_LISTED
        if end.status == TaggedCheckpoint.Status.LISTED
        else GuardAction.CHECKPOINT_FAILED,
        target=guard,
        request_id=guard.request_id,
        data={
            "vpg": row.vpg_name,
            "vpg_identifier": row.vpg_identifier,
            "status": end.status,
            "error": end.error,
            "checkpoint_identifier": checkpoint.identifier if checkpoint else None,
            "waited_ms": row.waited_ms,
            "tag": guard.tag,
            **_clock_data(checkpoint, end.offset_s),
        },
    )


def _clock_data(checkpoint: Checkpoint | None, offset_s: float) -> dict[str, object]:
    """The checkpoint's time as the ZVM shows it and on our clock (the audit's), and the offset."""
    if checkpoint is None or checkpoint.timestamp is None:
        return {"clock_offset_s": round(offset_s, 3)}
    return {
        "checkpoint_timestamp": checkpoint.timestamp.isoformat(),
        "checkpoint_time_ours": from_zvm(checkpoint.timestamp, offset_s).isoformat(),
        "clock_offset_s": round(offset_s, 3),
    }


def guards_finish(guards: Iterable[ChangeGuard]) -> None:
    """End each guard whose rows have all ended (ok when all are listed), audited, in one transaction; a
    compare-and-swap on the guards still unfinished. A failed guard is announced in the same transaction."""
    by_pk = {guard.pk: guard for guard in guards}
    if not by_pk:
        return
    rows: dict[int, list[TaggedCheckpoint]] = defaultdict(list)
    for row in TaggedCheckpoint.objects.filter(guard_id__in=list(by_pk)).order_by("pk"):
        rows[row.guard_id].append(row)
    ended = [pk for pk in by_pk if all(r.status in TaggedCheckpoint.FINAL for r in rows[pk])]
    if not ended:
        return
    now = timezone.now()
    with transaction.atomic():
        # Unfinished, not only running: a guard failed before any batch took it up is still pending.
        unfinished = set(
            ChangeGuard.objects.select_for_update()
            .filter(pk__in=ended, status__in=ChangeGuard.UNFINISHED)
            .values_list("pk", flat=True)
        )
        won = [by_pk[pk] for pk in ended if pk in unfinished]
        if not won:
            return
        for guard in won:
            _apply_guard_end(guard, rows[guard.pk], now)
        update_rows(won, ("status", "error", "finished_at"))
        audit_append([_guard_end_entry(guard, rows[guard.pk]) for guard in won])
        for guard in won:
            if guard.status == ChangeGuard.Status.FAILED:
                guard_announce_failed(guard=guard, rows=rows[guard.pk])


def _apply_guard_end(guard: ChangeGuard, rows: list[TaggedCheckpoint], now: datetime) -> None:
    listed = TaggedCheckpoint.Status.LISTED
    ok = all(r.status == listed for r in rows)
    guard.status = ChangeGuard.Status.OK if ok else ChangeGuard.Status.FAILED
    guard.error = "; ".join(f"VPG {r.vpg_name}: {r.error or r.status}" for r in rows if r.status != listed)[:4000]
    guard.finished_at = now


def _guard_end_entry(guard: ChangeGuard, rows: list[TaggedCheckpoint]) -> AuditEntry:
    listed = TaggedCheckpoint.Status.LISTED
    return AuditEntry(
        actor=Actor.system(),
        action=GuardAction.OK if guard.status == ChangeGuard.Status.OK else GuardAction.FAILED,
        target=guard,
        request_id=guard.request_id,
        data={
            "status": guard.status,
            "error": guard.error,
            "listed": [r.vpg_name for r in rows if r.status == listed],
            "not_listed": [r.vpg_name for r in rows if r.status != listed],
        },
    )
