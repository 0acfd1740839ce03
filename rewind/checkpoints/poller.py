"""One poller per site: a chain of short poll rounds that serves every waiting guard of the site (docs/guard.md).

A round is a Celery task that runs for as long as its ZVM calls take, then queues the next with a countdown:
between rounds a waiting guard holds no worker slot, thread or connection. At most one round per site is queued
or running, as the ``SitePoller`` row's lease says; ``poller_kick`` makes one run by a given time, and a chain
that died (its lease expired) is started again by the beat's sweep, a read of one of its guards or the next
kick. Every row keeps its own state, so nothing is lost or asked twice. Oldest guard first: when the site's
request cap is the bottleneck, the oldest waits least.
"""

from __future__ import annotations

import functools
import logging
import time
from datetime import datetime, timedelta

from django.db import connection
from django.db.models import F, Q
from django.utils import timezone

from rewind.checkpoints.insert_batch import BatchReport, batch_size, site_insert_batch
from rewind.checkpoints.lease import ROUND_LEASE_S, Lease
from rewind.checkpoints.models import ChangeGuard, SitePoller, TaggedCheckpoint
from rewind.checkpoints.poll_round import RoundReport, SiteRound, guards_of, site_has_due_rows
from rewind.checkpoints.rows import RowEnd, guards_finish, rows_finish
from rewind.checkpoints.selectors import site_inserted_rows
from rewind.lib import bulk
from rewind.sites import site_client, site_clock_offset_s, site_record_clock
from rewind.sites.models import Site
from rewind.workers.broker import queue_task
from rewind.workers.selectors import broker_answered_again_at

logger = logging.getLogger(__name__)

POLL_TASK = "rewind.checkpoints.poll_site"  # in queued messages: never rename
_RENEW_EVERY_S = ROUND_LEASE_S / 3
_CAS_TRIES = 8


def poller_kick(site_id: int, at: datetime | None = None) -> None:
    """Make sure a round of the site's poller runs no later than ``at`` (default: now)."""
    at = at or timezone.now()
    poller = _poller_read(site_id) or SitePoller.objects.get_or_create(site_id=site_id)[0]
    for _ in range(_CAS_TRIES):
        if _kicked(poller, at):
            return
        poller = SitePoller.objects.get(pk=site_id)  # another process changed it meanwhile: read it again
    logger.warning("poller of site %s: could not be kicked after %s tries", site_id, _CAS_TRIES)


def _poller_read(site_id: int) -> SitePoller | None:
    """The site's poller row, None when there is none yet: one plain query built once, as every guard and every
    round reads it and the ORM's ``get_or_create`` cost more to build than to answer."""
    return bulk.row_by_pk(SitePoller, site_id)


def _kicked(poller: SitePoller, at: datetime) -> bool:
    """One compare-and-swap try of ``poller_kick`` from what ``poller`` read; False: the row changed meanwhile."""
    site_id = poller.pk
    now = timezone.now()
    alive = poller.lease.alive(now)
    if poller.lease.is_running(now):
        if poller.wanted_at is not None and poller.wanted_at <= at:
            # Noted as soon or sooner already: the running round queues its successor by then,
            # and that round's batch sees this guard's rows (committed before this kick).
            return True
        later = Q(wanted_at__isnull=True) | Q(wanted_at__gt=at)
        return bool(SitePoller.objects.filter(later, pk=site_id, lease_owner=poller.lease_owner).update(wanted_at=at))
    if alive and poller.next_round_at is not None and poller.next_round_at <= at:
        return True
    seen = Q(pk=site_id, lease_owner=poller.lease_owner, lease_expires_at=poller.lease_expires_at)
    return _queue_round(seen, site_id, at)


def _queue_round(rows: Q, site_id: int, at: datetime, **also: object) -> bool:
    """CAS the poller row matched by ``rows`` to a newly queued round at ``at``; send it once committed. ``also``:
    more fields the same UPDATE writes (the ending round's ``last_error``)."""
    lease = Lease.queued(at)
    token = lease.token
    won = SitePoller.objects.filter(rows).update(**lease.fields(), next_round_at=at, wanted_at=None, **also)
    if won:
        countdown = max(0.0, (at - timezone.now()).total_seconds())
        # A broker that refuses it is recorded as down: waiting guards are told, and once it answers
        # again the round is queued anew (``pollers_restart_dead``).
        queue_task(POLL_TASK, site_id, token, countdown=countdown, what=f"the poll round of site {site_id}")
    return bool(won)


def poller_round(site_id: int, token: str | None = None) -> str:
    """Run one round of the site's poller if it is this round's turn. Returns what happened, for the task log."""
    now = timezone.now()
    lease = Lease.running(now)
    run_id = lease.owner
    free = Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=now)
    if token:
        free |= Q(lease_owner=Lease.queued_owner(token))
    claimed = SitePoller.objects.filter(free, pk=site_id).update(
        **lease.fields(), last_round_at=now, rounds=F("rounds") + 1
    )
    if not claimed:
        return "skipped: another round holds the site"
    report = _round(site_id, run_id)
    _schedule_next(site_id, run_id, report)
    return (
        f"{report.inserted} inserted, {report.due} due, {report.listed} listed, {report.ended} ended, "
        f"{report.requests} requests"
    )


def _round(site_id: int, run_id: str) -> RoundReport:
    site = bulk.row_by_pk(Site, site_id)
    last_renew = [time.monotonic()]

    def renew() -> None:
        if time.monotonic() - last_renew[0] >= _RENEW_EVERY_S:
            SitePoller.objects.filter(pk=site_id, lease_owner=run_id).update(
                lease_expires_at=timezone.now() + timedelta(seconds=ROUND_LEASE_S)
            )
            last_renew[0] = time.monotonic()

    batch = BatchReport()
    if site is not None:
        # First the queued guards' inserts, oldest first; then the poll, which their rows join once due.
        batch = site_insert_batch(site, renew, limit=batch_size(site))
        guards_finish(batch.guards)
    if site is not None and site.enabled and not site_has_due_rows(site_id, timezone.now()):
        return _nothing_due(site, batch)
    rows = site_inserted_rows(site_id)
    _note_cut_off_inserts(rows)
    if not rows:
        return RoundReport(inserted=batch.inserted, ended=batch.ended, requests=batch.calls)
    if site is None or not site.enabled:
        error = "the protected site's ZVM is not configured (or is disabled) here"
        rows_finish([RowEnd(row, TaggedCheckpoint.Status.FAILED, error) for row in rows])
        guards_finish(guards_of(rows))
        return RoundReport(ended=len(rows) + batch.ended)
    client = site_client(site)
    offset = client.clock_offset()
    offset_s = offset.offset_s if offset is not None else site_clock_offset_s(site)
    report = SiteRound(site, client, offset_s, renew).run(rows)
    site_record_clock(site=site, measured=client.clock_offset())
    # Only a guard a row of which ended here can have become finished.
    guards_finish(guards_of([r for r in rows if r.guard_id in report.ended_guards]))
    report.inserted = batch.inserted
    report.ended += batch.ended
    report.requests += batch.calls
    return report


def _nothing_due(site: Site, batch: BatchReport) -> RoundReport:
    """A round with no row due asks the ZVM nothing, so it reads none of the site's waiting rows: most rounds of a
    burst run only for their insert batch, and loading every waiting row for nothing cost more CPU than the rest
    of such a round. It writes what the full round would: the clock, and its error with its successor."""
    if batch.calls:
        site_record_clock(site=site, measured=site_client(site).clock_offset())
    return RoundReport(inserted=batch.inserted, ended=batch.ended, requests=batch.calls)


def _note_cut_off_inserts(rows: list[TaggedCheckpoint]) -> None:
    """Rows left "inserting" with no answer by an earlier round whose worker died mid-call: their outcome is
    unknown, and the poll adopts their task by tag and task list, or has them inserted once more after
    ``poll_round.SETTLE_S``. Written only when there is one, so most rounds take no write lock for it."""
    cut = [r for r in rows if r.status == TaggedCheckpoint.Status.INSERTING and not r.task_id]
    cut = [r for r in cut if r.outcome_unknown_since is None]
    if not cut:
        return
    now = timezone.now()
    TaggedCheckpoint.objects.filter(pk__in=[r.pk for r in cut], outcome_unknown_since__isnull=True).update(
        outcome_unknown_since=now
    )
    for row in cut:
        row.outcome_unknown_since = now


def _schedule_next(site_id: int, run_id: str, report: RoundReport) -> None:
    """Queue the next round at the earliest time a row of the site is due, or end the chain; the same write records
    the round's error ("" once a round went well)."""
    error = report.error[:2000]
    for _ in range(_CAS_TRIES):
        poller = _poller_read(site_id)
        if poller is None or poller.lease_owner != run_id:
            return  # our lease ran out and another round took over (or the site was deleted)
        due, waiting, queued = _site_rows_ahead(site_id)
        if due is None and waiting:
            due = timezone.now()  # a row handed over without a time: look at once
        if queued:
            due = timezone.now()  # queued guards left for the next batch
        at = min((t for t in (due, poller.wanted_at) if t is not None), default=None)
        same = Q(pk=site_id, lease_owner=run_id) & (
            Q(wanted_at=poller.wanted_at) if poller.wanted_at else Q(wanted_at__isnull=True)
        )
        if at is None:
            ended = SitePoller.objects.filter(same).update(
                lease_owner="", lease_expires_at=None, next_round_at=None, wanted_at=None, last_error=error
            )
            if ended:
                return
            continue
        at = max(at, timezone.now())
        if _queue_round(same, site_id, at, last_error=error):
            return
    logger.warning("poller of site %s: could not queue its next round; the sweep will restart it", site_id)


def _site_rows_ahead(site_id: int) -> tuple[datetime | None, bool, bool]:
    """What the site's next round has to do: the earliest time a waiting row is due, whether a row waits at all,
    and whether a queued guard's row is left for a batch. One statement built once: every round ends with it."""
    waiting = [str(s) for s in TaggedCheckpoint.INSERTED]
    queued = [str(TaggedCheckpoint.Status.PENDING), *(str(s) for s in ChangeGuard.UNFINISHED)]
    with connection.cursor() as cursor:
        cursor.execute(_rows_ahead_sql(connection.vendor), [*waiting, *waiting, *queued, site_id, *waiting, queued[0]])
        due, waiting_count, queued_count = cursor.fetchone()
    return bulk.value_from_db(TaggedCheckpoint, "next_poll_at", due), waiting_count > 0, queued_count > 0


@functools.cache
def _rows_ahead_sql(vendor: str) -> str:
    row, guard = bulk.column_of(TaggedCheckpoint, "c"), bulk.column_of(ChangeGuard, "g")
    waiting = f"{row('status')} IN ({bulk.marks(TaggedCheckpoint.INSERTED)})"
    queued = f"{row('status')} = %s AND {guard('status')} IN ({bulk.marks(ChangeGuard.UNFINISHED)})"
    ahead = (*TaggedCheckpoint.INSERTED, TaggedCheckpoint.Status.PENDING)
    return (
        f"SELECT MIN(CASE WHEN {waiting} THEN {row('next_poll_at')} END), "
        f"COUNT(CASE WHEN {waiting} THEN 1 END), COUNT(CASE WHEN {queued} THEN 1 END) "
        f"FROM {bulk.table(TaggedCheckpoint)} c INNER JOIN {bulk.table(ChangeGuard)} g ON {guard('id')} = {row('guard')} "
        f"WHERE {row('site')} = %s AND {row('status')} IN ({bulk.marks(ahead)})"
    )


def pollers_restart_stale() -> int:
    """The beat's sweep: start a round for every site with waiting rows whose poller's chain died."""
    waiting = Q(status__in=TaggedCheckpoint.INSERTED) | Q(
        status=TaggedCheckpoint.Status.PENDING, guard__status__in=ChangeGuard.UNFINISHED
    )
    sites = set(TaggedCheckpoint.objects.filter(waiting, site__isnull=False).values_list("site_id", flat=True))
    return pollers_restart_dead(sites)


def pollers_restart_dead(site_ids: set[int]) -> int:
    """Start a round for each of these sites whose poller's chain died (or never started); how many.

    A round queued before the task queue's last outage ended counts as dead (its message may be lost): it is
    queued anew at once with a new token, so a message that survived finds its token gone and does nothing.
    """
    if not site_ids:
        return 0
    now = timezone.now()
    live = SitePoller.objects.filter(site_id__in=site_ids, lease_expires_at__gt=now)
    back_at = broker_answered_again_at()
    lost: dict[int, str] = {}
    if back_at is not None:
        queued_before = Q(lease_owner__startswith=Lease.queued_owner(""), next_round_at__lte=back_at)
        lost = dict(live.filter(queued_before).values_list("site_id", "lease_owner"))
    alive = set(live.values_list("site_id", flat=True)) - set(lost)
    for site_id in sorted(site_ids - alive):
        if site_id in lost:
            _queue_round(Q(pk=site_id, lease_owner=lost[site_id]), site_id, now)
        else:
            poller_kick(site_id, now)
    return len(site_ids - alive)
