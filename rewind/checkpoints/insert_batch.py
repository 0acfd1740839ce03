"""A site's insert batch: the pending tagged checkpoints of the site's queued guards, inserted in one pass.

The one place a checkpoint is inserted: a new guard kicks its sites' pollers, and each round runs this batch
first. It takes as many pending rows, oldest guard first, as the site's cap lets through in about ``BATCH_S``;
marks them "inserting" and audits each attempt in one transaction (compare-and-swap); makes the calls on
``THREADS`` threads paced by the cap; and records every answer in one transaction. No transaction is held across
a ZVM call. A batch cut off mid-call leaves its rows "inserting" with no task id, which the next round resolves
by tag and task list (``poller._note_cut_off_inserts``), never by calling again blindly.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import connection, transaction
from django.db.models import F, Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from rewind.audit import audit_append
from rewind.checkpoints import poll_timing
from rewind.checkpoints.models import ChangeGuard, TaggedCheckpoint
from rewind.checkpoints.rows import InsertAnswer, RowEnd, attempt_entry, insert_call, rows_finish, rows_save
from rewind.checkpoints.selectors import rows_with_guards, rows_with_guards_sql, site_listing_times_s, site_waiting_vpgs
from rewind.lib.bulk import column_of, marks
from rewind.lib.concurrency import run_each
from rewind.lib.dbclock import database_now
from rewind.sites import site_client, site_request_cap
from rewind.sites.models import Site
from rewind.workers.selectors import broker_outages_note

logger = logging.getLogger(__name__)

# A batch holds what the site's cap lets through in about this long, at least BATCH_MIN rows:
# a longer one would keep the round from polling the rows inserted before it.
BATCH_S = 2.0
BATCH_MIN = 8
THREADS = 8
# The poller's lease is renewed this often while the calls run (see poller.ROUND_LEASE_S).
RENEW_EVERY_S = 2.0

NOT_CONFIGURED = "the protected site's ZVM is not configured (or is disabled) here"
TOO_LATE = "not inserted: the guard had already timed out"


@dataclass
class BatchReport:
    inserted: int = 0  # calls answered with a task id
    unknown: int = 0  # calls whose answer was lost
    ended: int = 0  # rows ended here (too late, refused, site gone)
    guards: list[ChangeGuard] = field(default_factory=list)  # guards with a row ended here

    @property
    def calls(self) -> int:
        return self.inserted + self.unknown


def batch_rows(site_id: int) -> Q:
    """The rows an insert batch of the site takes: pending, of an unfinished guard."""
    return Q(site_id=site_id, status=TaggedCheckpoint.Status.PENDING, guard__status__in=ChangeGuard.UNFINISHED)


def batch_size(site: Site) -> int:
    return max(BATCH_MIN, math.ceil(site_request_cap(site) * BATCH_S))


def site_insert_batch(site: Site, renew: Callable[[], None], *, limit: int) -> BatchReport:
    """Insert up to ``limit`` pending rows of the site's queued guards (see the module). Repeatable."""
    report = BatchReport()
    now = timezone.now()
    rows = _batch_rows(site, limit)
    if not rows:
        return report
    _claim(site.pk, now)
    if not site.enabled:
        _end_all(rows, TaggedCheckpoint.Status.FAILED, NOT_CONFIGURED, report)
        return report
    late = [r for r in rows if now >= r.guard.deadline]
    if late:
        # Ending them cannot be undone: the shared clock decides, not this process's alone.
        now = database_now()
        late = [r for r in late if now >= r.guard.deadline]
    if late:
        outages = broker_outages_note(min(r.guard.requested_at for r in late), now)
        _end_all(late, TaggedCheckpoint.Status.TIMED_OUT, f"{TOO_LATE}; {outages}" if outages else TOO_LATE, report)
    marked = _mark_attempts([r for r in rows if r not in late])
    if not marked:
        return report
    answers = _call_all(site, marked, renew)
    _record(site, marked, answers, report)
    return report


def _batch_rows(site: Site, limit: int) -> list[TaggedCheckpoint]:
    """Up to ``limit`` rows of ``batch_rows``, oldest guard first, each with its guard and site: one plain
    statement built once, as every round starts with it and most find nothing."""
    statuses = [str(TaggedCheckpoint.Status.PENDING), *(str(s) for s in ChangeGuard.UNFINISHED)]
    params: list[int | str] = [site.pk, *statuses, limit]
    rows = rows_with_guards(_batch_rows_sql(connection.vendor), params)
    for row in rows:
        row.site = site
    return rows


@functools.cache
def _batch_rows_sql(vendor: str) -> str:
    row, guard = column_of(TaggedCheckpoint, "c"), column_of(ChangeGuard, "g")
    return rows_with_guards_sql(
        f"{row('site')} = %s AND {row('status')} = %s AND {guard('status')} IN ({marks(ChangeGuard.UNFINISHED)})",
        "LIMIT %s",
    )


def _claim(site_id: int, now: datetime) -> None:
    """Every pending guard with a row at the site becomes running (one UPDATE), those left for a later batch too,
    so they read as queued behind the site's cap rather than waiting for a worker. Run after the batch's rows
    were read; a guard recorded in between is claimed too, and its rows are the next batch's (queued at once)."""
    pending = TaggedCheckpoint.objects.filter(batch_rows(site_id)).values("guard_id")
    ChangeGuard.objects.filter(pk__in=pending, status=ChangeGuard.Status.PENDING).update(
        status=ChangeGuard.Status.RUNNING, started_at=Coalesce(F("started_at"), now)
    )


def _end_all(rows: list[TaggedCheckpoint], status: str, error: str, report: BatchReport) -> None:
    _ended(rows_finish([RowEnd(row, status, error) for row in rows]), report)


def _ended(ends: list[RowEnd], report: BatchReport) -> None:
    report.ended += len(ends)
    report.guards.extend(end.row.guard for end in ends)


def _mark_attempts(rows: list[TaggedCheckpoint]) -> list[TaggedCheckpoint]:
    """CAS the rows still pending to "inserting" and audit every attempt: one transaction, before any call."""
    if not rows:
        return []
    by_pk = {r.pk: r for r in rows}
    now = timezone.now()
    with transaction.atomic():
        pending = TaggedCheckpoint.objects.filter(pk__in=list(by_pk), status=TaggedCheckpoint.Status.PENDING)
        # Locked (PostgreSQL) or under the write lock (SQLite): the UPDATE below changes exactly these.
        order = {pk: i for i, pk in enumerate(by_pk)}
        won = sorted(pending.select_for_update().values_list("pk", flat=True), key=order.__getitem__)
        TaggedCheckpoint.objects.filter(pk__in=won, status=TaggedCheckpoint.Status.PENDING).update(
            status=TaggedCheckpoint.Status.INSERTING, insert_started_at=now, outcome_unknown_since=None
        )
        audit_append([attempt_entry(by_pk[pk], by_pk[pk].guard, retry=by_pk[pk].reinserted) for pk in won])
    marked = [by_pk[pk] for pk in won]
    for row in marked:
        row.status, row.insert_started_at = TaggedCheckpoint.Status.INSERTING, now
        if row.guard.status == ChangeGuard.Status.PENDING:  # read before ``_claim`` made it running
            row.guard.status = ChangeGuard.Status.RUNNING
    return marked


@dataclass
class _Answered:
    answer: InsertAnswer
    at: datetime  # when the answer came: the ZVM made its task just before


def _call_all(site: Site, rows: list[TaggedCheckpoint], renew: Callable[[], None]) -> dict[int, _Answered]:
    """The insert calls on up to ``THREADS`` threads, the poller's lease renewed meanwhile. No time limit of its
    own: each call is bounded by the client's timeouts, and every answer waited for is one the round records."""

    def call(row: TaggedCheckpoint) -> _Answered:
        try:
            client = site_client(site, request_id=row.guard.request_id)
            answer = insert_call(client, row, row.guard)
        except Exception as exc:  # anything unforeseen must still end the row, or the guard hangs
            logger.exception("insert batch of site %s: the insert of row %s failed", site.name, row.pk)
            answer = InsertAnswer(unknown=f"internal error ({type(exc).__name__})")
        return _Answered(answer, timezone.now())

    outcomes = run_each(
        rows, call, max_threads=THREADS, name=f"insert-{site.pk}", heartbeat=renew, heartbeat_s=RENEW_EVERY_S
    )
    # A call without a value ended by something no ``except Exception`` catches: ``_record``
    # takes its row as one whose answer was lost.
    return {o.item.pk: o.value for o in outcomes if o.value is not None}


def _record(site: Site, rows: list[TaggedCheckpoint], answers: dict[int, _Answered], report: BatchReport) -> None:
    """Every answer of the batch in one transaction: a failure ends its row; a task id makes it wait, due when the
    site's pacing says (at the window's end when the site is crowded); a lost answer leaves it "inserting" with
    the outcome unknown since now, for the poller to resolve by tag and task list."""
    now = timezone.now()
    fc = poll_timing.forecast(site_listing_times_s(site.pk, limit=poll_timing.HISTORY))
    crowded = poll_timing.crowded(site_waiting_vpgs(site.pk), site_request_cap(site), fc)
    probers = poll_timing.probers(r.vpg_identifier for r in rows)  # the batch's oldest guards
    failed: list[RowEnd] = []
    kept: list[TaggedCheckpoint] = []
    for row in rows:
        got = answers.get(row.pk)
        if got is None:  # its thread died before answering: as good as a lost answer
            got = _Answered(InsertAnswer(unknown="the insert call's outcome is unknown (no answer)"), now)
        answer = got.answer
        if answer.failed is not None:
            failed.append(RowEnd(row, TaggedCheckpoint.Status.FAILED, answer.failed.error))
            continue
        remaining = (row.guard.deadline - now).total_seconds()
        if answer.task_id:
            # The listing time is counted from the task's making (the answer), not from when the
            # batch began: the cap may have held the call back, and pacing must not learn that.
            row.task_id, row.status, row.error, row.outcome_unknown_since = (
                answer.task_id,
                TaggedCheckpoint.Status.WAITING,
                "",
                None,
            )
            row.insert_started_at = got.at
            report.inserted += 1
        else:
            row.error, row.outcome_unknown_since = answer.unknown[:2000], now
            report.unknown += 1
        elapsed = (now - (row.insert_started_at or now)).total_seconds()
        gap = poll_timing.next_gap(
            elapsed, remaining, poll_timing.probing(fc, row.vpg_identifier, probers), crowded=crowded
        )
        row.next_poll_at = now + timedelta(seconds=gap)
        kept.append(row)
    with transaction.atomic():
        _ended(rows_finish(failed), report)
        # Still "inserting" as this batch left them: a row another run adopted a task for meanwhile is left alone.
        rows_save(kept, _ANSWER_FIELDS, was=TaggedCheckpoint.Status.INSERTING)


_ANSWER_FIELDS = ("task_id", "status", "error", "outcome_unknown_since", "insert_started_at", "next_poll_at")
