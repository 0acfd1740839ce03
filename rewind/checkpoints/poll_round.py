"""One poll round of one site: what the site's ZVM says about every waiting tagged checkpoint there.

For the rows that are due, oldest guard first: one ``GET /v1/tasks`` filtered by start time for every insert
task still running (not by type, whose value ``InsertTaggedCP`` is only inferred and would hide every task if
wrong); one checkpoint listing per VPG whose insert completed, shared by every guard of that VPG; and a task no
row claims adopted for an insert whose answer was lost. So ZVM requests grow with the VPGs, not with guards
times polls, and the site's cap bounds them all. A row not done gets its next time from ``poll_timing``.
"""

from __future__ import annotations

import functools
import logging
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import connection
from django.utils import timezone

from rewind.checkpoints import poll_timing
from rewind.checkpoints.models import ChangeGuard, TaggedCheckpoint
from rewind.checkpoints.rows import RowEnd, row_since, rows_finish, rows_save
from rewind.checkpoints.selectors import site_listing_times_s
from rewind.lib.bulk import column, marks, table
from rewind.lib.dbclock import database_now
from rewind.sites import site_request_cap
from rewind.sites.models import Site
from rewind.workers.selectors import broker_outages_note
from rewind.zvm import Checkpoint, Task, ZvmClient, ZvmError, ZvmNotFoundError, ZvmRejectedError

logger = logging.getLogger(__name__)

# The type of the ZVM tasks that insert a tagged checkpoint.
INSERT_TASK_TYPE = "InsertTaggedCP"

# An insert whose outcome is unknown is repeated only when, this long after we started
# wondering, the ZVM lists neither the tag nor an insert task for the VPG.
SETTLE_S = 5.0
# A row is due when its time is this close: one round serves the rows due together, and
# asking a fraction of a second early costs nothing.
DUE_SLACK = timedelta(milliseconds=300)
# After a round that could not ask the ZVM (it failed, or its circuit is open), its rows ask again this soon.
RETRY_S = 2.0
# What a round learns from the task list about rows, due or not.
_TASK_STATE_FIELDS = ("task_started_at", "task_completed_at", "last_miss_at")


def site_has_due_rows(site_id: int, now: datetime) -> bool:
    """Whether a round started at ``now`` has a row of the site to ask about: one inserted (or with its outcome
    unknown) and without a time, or due within ``DUE_SLACK`` (as ``run`` picks them)."""
    field = TaggedCheckpoint._meta.get_field("next_poll_at")
    with connection.cursor() as cursor:
        cursor.execute(
            _due_sql(connection.vendor),
            [
                site_id,
                *(str(s) for s in TaggedCheckpoint.INSERTED),
                field.get_db_prep_value(now + DUE_SLACK, connection),
            ],
        )
        return cursor.fetchone() is not None


@functools.cache
def _due_sql(vendor: str) -> str:
    """Plain SQL built once: through the ORM, building the query cost about what it saved."""
    statuses = marks(TaggedCheckpoint.INSERTED)
    at = column(TaggedCheckpoint, "next_poll_at")
    return (
        f"SELECT 1 FROM {table(TaggedCheckpoint)} WHERE {column(TaggedCheckpoint, 'site')} = %s "
        f"AND {column(TaggedCheckpoint, 'status')} IN ({statuses}) "
        f"AND ({at} IS NULL OR {at} <= %s) LIMIT 1"
    )


@dataclass
class RoundReport:
    inserted: int = 0
    due: int = 0
    listed: int = 0
    ended: int = 0
    requests: int = 0
    error: str = ""
    guards: set[int] = field(default_factory=set)
    ended_guards: set[int] = field(default_factory=set)  # guards a row of which ended this round


class SiteRound:
    """The work of one round; ``renew`` is called between ZVM calls to keep the poller's lease."""

    def __init__(self, site: Site, client: ZvmClient, offset_s: float, renew: Callable[[], None]) -> None:
        self.site = site
        self.client = client
        self.offset_s = offset_s
        self.renew = renew
        self.now = timezone.now()
        self.report = RoundReport()
        self.fc = poll_timing.forecast(site_listing_times_s(site.pk, limit=poll_timing.HISTORY))
        self.crowded = False
        self.probers: set[str] = set()
        self.ends: list[RowEnd] = []  # rows this round ended, written together at its end
        # Rows not due whose VPG a due row had listed: that listing answered them too.
        self.asked_early: list[TaggedCheckpoint] = []
        # When each VPG's listing came back: its rows' next looks count from then, not from the
        # round's start (a round listing many VPGs lasts a while).
        self.answered_at: dict[str, datetime] = {}
        self._database_now: datetime | None = None

    def run(self, rows: list[TaggedCheckpoint]) -> RoundReport:
        """Ask about the rows that are due; what an answer says about rows not yet due is used too."""
        due = [r for r in rows if r.next_poll_at is None or r.next_poll_at <= self.now + DUE_SLACK]
        self.report.guards = {r.guard_id for r in rows}
        waiting = [r.vpg_identifier for r in rows if r.status not in TaggedCheckpoint.FINAL]
        self.crowded = poll_timing.crowded(len(set(waiting)), site_request_cap(self.site), self.fc)
        self.probers = poll_timing.probers(waiting)
        later = self._first_look_moved(due)
        if later:
            moved = {r.pk for r in later}
            due = [r for r in due if r.pk not in moved]
            rows_save(later, ("next_poll_at",))
        self.report.due = len(due)
        if not due:
            return self.report
        before = {r.pk: _task_state(r) for r in rows}
        try:
            tasks = self._tasks(due, rows)
            self._read_task_states(due, rows, tasks)
            self._adopt_unknown(due, tasks)
            self._list(due, rows)
            self._reinsert_unknown(due)
        except ZvmError as exc:
            # The round could not finish asking: its rows keep their place and ask again soon.
            self.report.error = str(exc)
            logger.warning("poller of site %s: the round failed: %s", self.site.name, exc)
        rescheduled = due + self.asked_early
        self._reschedule(rescheduled)
        self.report.ended += len(rows_finish(self.ends))
        due_pks = {r.pk for r in rescheduled}
        # Rows not due keep their time; only those this round learned something about are written
        # (a site with many waiting rows would otherwise rewrite every one of them every round).
        learned = [r for r in rows if r.pk not in due_pks and r.status not in TaggedCheckpoint.FINAL]
        rows_save([r for r in learned if _task_state(r) != before[r.pk]], _TASK_STATE_FIELDS)
        return self.report

    def _first_look_moved(self, due: list[TaggedCheckpoint]) -> list[TaggedCheckpoint]:
        """Due rows not yet looked whose first look the newest forecast puts later: each gets that time, and
        nothing is asked for it now. When the first rows of a burst find the ZVM slower than forecast, the rest
        wait for the new moment instead of each spending a request (a slot another guard needed) on a miss."""
        if self.fc is None:
            return []
        later = []
        for row in due:
            start = row.insert_started_at
            if row.status != TaggedCheckpoint.Status.WAITING or row.last_miss_at is not None or start is None:
                continue
            fc = poll_timing.probing(self.fc, row.vpg_identifier, self.probers)
            at = min(
                start + timedelta(seconds=poll_timing.first_look_s(fc, crowded=self.crowded)),
                row.guard.deadline,
                self.now + timedelta(seconds=poll_timing.LONG_SLEEP_S),
            )
            if at > self.now + DUE_SLACK:
                row.next_poll_at = at
                later.append(row)
        return later

    # -- 1. insert tasks -------------------------------------------------------------------
    def _tasks(self, due: list[TaggedCheckpoint], rows: list[TaggedCheckpoint]) -> dict[str, Task]:
        if not any(self._needs_task(r) or not r.task_id for r in due):
            return {}
        # One list for the whole site: wide enough for the rows not yet due as well.
        since = min(row_since(r, self.offset_s) for r in rows if self._needs_task(r) or not r.task_id)
        self.report.requests += 1
        try:
            listed = self.client.list_tasks(started_after=since)
        except ZvmRejectedError as exc:
            # A ZVM that refuses the filter: each task is then read on its own.
            logger.info(
                "poller of site %s: the task list was refused (%s); reading tasks one by one", self.site.name, exc
            )
            return {}
        finally:
            self.renew()
        return {t.identifier: t for t in listed if t.identifier}

    @staticmethod
    def _needs_task(row: TaggedCheckpoint) -> bool:
        return bool(row.task_id) and row.task_completed_at is None

    def _read_task_states(
        self, due: list[TaggedCheckpoint], rows: list[TaggedCheckpoint], tasks: dict[str, Task]
    ) -> None:
        due_pks = {r.pk for r in due}
        for row in rows:
            if not self._needs_task(row) or row.status in TaggedCheckpoint.FINAL:
                continue
            task = tasks.get(row.task_id)
            if task is None and row.pk not in due_pks:
                continue  # not in the list and not due: its own turn will read it
            task = task or self._one_task(row)
            if task is None:
                row.task_completed_at = self.now  # the ZVM forgot the task: the checkpoint list decides
                continue
            row.task_started_at = task.started or row.task_started_at
            if task.failed:
                reason = task.complete_reason or "no reason given"
                self._end(
                    row, TaggedCheckpoint.Status.FAILED, f"the ZVM's insert task ended in state {task.state}: {reason}"
                )
            elif task.completed:
                row.task_completed_at = self.now

    def _one_task(self, row: TaggedCheckpoint) -> Task | None:
        self.report.requests += 1
        try:
            return self.client.get_task(row.task_id)
        except ZvmNotFoundError:
            return None
        finally:
            self.renew()

    # -- 3. lost answers ---------------------------------------------------------------------
    def _adopt_unknown(self, due: list[TaggedCheckpoint], tasks: dict[str, Task]) -> None:
        unknown = [r for r in due if not r.task_id and r.status == TaggedCheckpoint.Status.INSERTING]
        if not unknown:
            return
        claimed = set(TaggedCheckpoint.objects.filter(task_id__in=list(tasks)).values_list("task_id", flat=True))
        for row in unknown:
            free = sorted(
                (t.started.isoformat() if t.started else "", ident)
                for ident, t in tasks.items()
                if ident not in claimed and _is_insert_of(t, row.vpg_identifier)
            )
            if not free:
                continue
            task_id = free[0][1]
            adopted = TaggedCheckpoint.objects.filter(
                pk=row.pk, status=TaggedCheckpoint.Status.INSERTING, task_id=""
            ).update(task_id=task_id, status=TaggedCheckpoint.Status.WAITING, outcome_unknown_since=None, error="")
            if adopted:
                claimed.add(task_id)
                row.refresh_from_db()
                task = tasks[task_id]
                row.task_started_at = task.started
                if task.completed:
                    row.task_completed_at = self.now

    def _reinsert_unknown(self, due: list[TaggedCheckpoint]) -> None:
        for row in due:
            if row.task_id or row.status != TaggedCheckpoint.Status.INSERTING:
                continue
            since = row.outcome_unknown_since
            if row.reinserted or since is None or (self.now - since).total_seconds() < SETTLE_S:
                continue
            # No tag and no insert task: the call never reached the ZVM. The next batch inserts once more.
            requeued = TaggedCheckpoint.objects.filter(
                pk=row.pk,
                status=TaggedCheckpoint.Status.INSERTING,
                task_id="",
                insert_started_at=row.insert_started_at,
                reinserted=False,
            ).update(status=TaggedCheckpoint.Status.PENDING, reinserted=True, next_poll_at=None)
            if requeued:
                row.status, row.reinserted = TaggedCheckpoint.Status.PENDING, True

    # -- 2. checkpoint lists -----------------------------------------------------------------
    def _list(self, due: list[TaggedCheckpoint], every: list[TaggedCheckpoint]) -> None:
        """One listing per VPG with a due row, matched against every waiting row of that VPG; a row not yet due
        counts its next time from it too (``asked_early``), or each guard sharing a VPG would list it on its own
        schedule (measured: see the benchmarks page)."""
        by_vpg: dict[str, list[TaggedCheckpoint]] = defaultdict(list)
        for row in every:
            if row.status not in TaggedCheckpoint.FINAL and (row.task_completed_at is not None or not row.task_id):
                by_vpg[row.vpg_identifier].append(row)
        wanted = {r.vpg_identifier for r in due}
        due_pks = {r.pk for r in due}
        for vpg_id, rows in by_vpg.items():
            if vpg_id not in wanted:
                continue
            since = min(row_since(r, self.offset_s) for r in rows)
            self.report.requests += 1
            asked_at = timezone.now()
            try:
                listed = self.client.list_checkpoints(vpg_id, start=since)
            except ZvmNotFoundError as exc:
                for row in rows:
                    self._end(row, TaggedCheckpoint.Status.FAILED, f"the VPG is gone: {exc}")
                continue
            except ZvmRejectedError as exc:
                _note(rows, str(exc))
                continue
            finally:
                self.renew()
            self.answered_at[vpg_id] = timezone.now()
            self._match(rows, listed, asked_at, self.answered_at[vpg_id])
            self.asked_early += [r for r in rows if r.pk not in due_pks and r.status not in TaggedCheckpoint.FINAL]

    def _match(
        self, rows: Iterable[TaggedCheckpoint], listed: list[Checkpoint], asked_at: datetime, answered_at: datetime
    ) -> None:
        """Which rows the listing holds. A miss says the checkpoint was not listed when we asked; a hit, that it
        was by the answer: the time to list is bracketed by what happened, not by when the round began."""
        by_tag = {(cp.tag or "").strip(): cp for cp in listed if cp.tag}
        for row in rows:
            found = by_tag.get(row.guard.tag.strip())
            if found is None:
                row.last_miss_at = asked_at
                continue
            self._end(row, TaggedCheckpoint.Status.LISTED, "", found, seen_at=answered_at)
            self.report.listed += 1

    # -- the rows' next times -------------------------------------------------------------
    def _reschedule(self, due: list[TaggedCheckpoint]) -> None:
        """Each due row still waiting gets its next time (one statement for all); one past its deadline ends."""
        waiting = []
        for row in due:
            if row.status in TaggedCheckpoint.FINAL or row.status == TaggedCheckpoint.Status.PENDING:
                continue  # ended, or back with the insert batch
            deadline = row.guard.deadline
            remaining = (deadline - self.now).total_seconds()
            if remaining <= 0:
                # Ending a guard cannot be undone: the shared clock decides, not this process's alone.
                remaining = (deadline - self._shared_now()).total_seconds()
            if remaining <= 0:
                outages = broker_outages_note(row.guard.requested_at, self._shared_now())
                self._end(row, TaggedCheckpoint.Status.TIMED_OUT, _timeout_reason(row, self.report.error, outages))
                continue
            looked_at = self.answered_at.get(row.vpg_identifier, self.now)
            if self.report.error:
                gap = min(RETRY_S, remaining)
            else:
                start = row.insert_started_at or row.guard.requested_at
                elapsed = (looked_at - start).total_seconds()
                fc = poll_timing.probing(self.fc, row.vpg_identifier, self.probers)
                gap = poll_timing.next_gap(elapsed, remaining, fc, crowded=self.crowded)
            row.next_poll_at = looked_at + timedelta(seconds=gap)
            row.error = row.error[:2000]
            waiting.append(row)
        rows_save(waiting, ("next_poll_at", "error", *_TASK_STATE_FIELDS))

    def _shared_now(self) -> datetime:
        """The database's clock (``rewind.lib.dbclock``), read once per round."""
        if self._database_now is None:
            self._database_now = database_now()
        return self._database_now

    def _end(
        self,
        row: TaggedCheckpoint,
        status: str,
        error: str,
        checkpoint: Checkpoint | None = None,
        *,
        seen_at: datetime | None = None,
    ) -> None:
        """End the row at the end of the round (``rows_finish``, with the round's other ends)."""
        listed_after = None
        if status == TaggedCheckpoint.Status.LISTED:
            listed_after = listing_time_ms(row, seen_at or self.now, fc=self.fc, crowded=self.crowded)
        self.ends.append(RowEnd(row, status, error, checkpoint, self.offset_s, listed_after))
        self.report.ended_guards.add(row.guard_id)
        row.status = status


# A checkpoint already listed at the first look was listed some time before it: the sample is
# taken this far below the moment we saw it, so the next guards look earlier, until a look
# finds the list without it and the time is known between two looks.
UNSEEN_SHARE = 0.8


def listing_time_ms(
    row: TaggedCheckpoint, seen_at: datetime, *, fc: poll_timing.Forecast | None = None, crowded: bool = False
) -> int | None:
    """How long the ZVM took to list the row's checkpoint, for the site's pacing to learn from.

    Between the last look that missed it and the one that found it (the midpoint); when the first look found it,
    an upper bound only, so ``UNSEEN_SHARE`` of it. Not when we saw it: under load the poller looks late, and
    learning that would make every later guard look late too. A first look that found it no sooner than the
    forecast (``fc``) expected, or at a ``crowded`` site (whose first looks wait for the window's end on
    purpose), only says the forecast held, so the forecast is the sample: a share of such a look would teach a
    faster ZVM that is not there and move the window early, where every look misses (measured: see the
    benchmarks page).
    """
    start = row.insert_started_at
    if start is None:
        return None
    seen = (seen_at - start).total_seconds()
    if row.last_miss_at is not None and row.last_miss_at > start:
        missed = (row.last_miss_at - start).total_seconds()
        return max(0, int((missed + seen) / 2 * 1000))
    if fc is not None and (crowded or seen >= fc.expected_s):
        return max(0, int(min(seen, fc.expected_s) * 1000))
    return max(0, int(seen * UNSEEN_SHARE * 1000))


def _task_state(row: TaggedCheckpoint) -> tuple[datetime | None, datetime | None, datetime | None]:
    """What a round may learn about a row from the task list, due or not (written at the round's end)."""
    return row.task_started_at, row.task_completed_at, row.last_miss_at


def _is_insert_of(task: Task, vpg_id: str) -> bool:
    # A ZVM that ignores filters still must not hand us other kinds of task.
    kind = (task.type or INSERT_TASK_TYPE).lower()
    return kind == INSERT_TASK_TYPE.lower() and vpg_id.lower() in {v.lower() for v in task.vpg_identifiers}


def _note(rows: Iterable[TaggedCheckpoint], error: str) -> None:
    for row in rows:
        row.error = f"last error: {error}"


def _timeout_reason(row: TaggedCheckpoint, round_error: str, outages: str = "") -> str:
    limit = f"within {row.guard.timeout_s} s"
    if not row.task_id:
        reason = f"the insert was interrupted and no checkpoint with the tag was listed {limit}"
    elif row.task_completed_at is None:
        reason = f"the ZVM's insert task did not complete {limit}"
    else:
        reason = f"the checkpoint was not listed {limit}"
    last = round_error or row.error.removeprefix("last error: ")
    if last:
        reason = f"{reason} (last error: {last})"
    return f"{reason}; {outages}" if outages else reason


def guards_of(rows: Iterable[TaggedCheckpoint]) -> list[ChangeGuard]:
    seen: dict[int, ChangeGuard] = {}
    for row in rows:
        seen.setdefault(row.guard_id, row.guard)
    return list(seen.values())
