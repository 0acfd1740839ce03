"""One poller per site: a chain of short poll rounds that serves every waiting guard of the site.

A round (``poll_round.SiteRound``) is a Celery task that runs for as long as its ZVM calls
take, then queues the next round with a countdown and returns: between rounds nothing
holds a worker slot, a thread or a database connection. At most one round per site runs
or is queued at a time; the ``SitePoller`` row says which (``queued:<token>`` or
``run:<id>``) and until when that holds:

- ``poller_kick(site, at)`` makes sure a round runs no later than ``at``: it starts a chain
  when none is alive, moves a queued round earlier (the replaced message finds its token
  gone and does nothing), and leaves a running round a note (``wanted_at``) that it reads
  when it schedules its successor;
- a round claims the row, inserts the checkpoints of the site's queued guards in one batch
  (``insert_batch``: a new guard queues no task of its own, it kicks its sites' pollers),
  asks the ZVM about the rows that are due, extends the leases of the guards it serves, and
  queues the next round at the earliest time a row is due (at once while guards are queued);
- a chain that died (worker killed, message lost) has an expired lease: the beat's sweep
  (``pollers_restart_stale``) or the next kick starts another. Every row keeps its own
  state, so nothing is lost and nothing is asked twice.

Guards are served in order of arrival: a round inserts and asks for its due rows oldest guard
first, so when the site's request cap is the bottleneck the oldest waits least.
"""

from __future__ import annotations

import logging
import time
import uuid
from datetime import datetime, timedelta

from celery import current_app
from django.db import transaction
from django.db.models import F, Min, Q
from django.utils import timezone

from rewind.checkpoints.insert_batch import BatchReport, batch_rows, batch_size, site_insert_batch
from rewind.checkpoints.lease import POLLER_GRACE_S, POLLER_OWNER, QUEUED_PREFIX, UNFINISHED
from rewind.checkpoints.models import ChangeGuard, SitePoller, TaggedCheckpoint
from rewind.checkpoints.poll_round import RoundReport, SiteRound, guards_of
from rewind.checkpoints.rows import INSERTED, guard_finish, row_finish
from rewind.sites import site_client, site_clock_offset_s, site_record_clock
from rewind.sites.models import Site

logger = logging.getLogger(__name__)

POLL_TASK = "rewind.checkpoints.poll_site"  # in queued messages: never rename
ROUND_LEASE_S = 15  # a running round holds the site this long, renewed between its ZVM calls
QUEUE_GRACE_S = 30  # a queued round that has not started this long after its time is replaced
_RENEW_EVERY_S = ROUND_LEASE_S / 3
_CAS_TRIES = 8


def poller_kick(site_id: int, at: datetime | None = None) -> None:
    """Make sure a round of the site's poller runs no later than ``at`` (default: now)."""
    at = at or timezone.now()
    poller, _ = SitePoller.objects.get_or_create(site_id=site_id)
    for _ in range(_CAS_TRIES):
        if _kicked(poller, at):
            return
        poller = SitePoller.objects.get(pk=site_id)  # another process changed it meanwhile: read it again
    logger.warning("poller of site %s: could not be kicked after %s tries", site_id, _CAS_TRIES)


def _kicked(poller: SitePoller, at: datetime) -> bool:
    """One compare-and-swap try of ``poller_kick`` from what ``poller`` read; False: the row changed meanwhile."""
    site_id = poller.pk
    alive = poller.lease_expires_at is not None and poller.lease_expires_at > timezone.now()
    if alive and poller.lease_owner.startswith("run:"):
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


def _queue_round(rows: Q, site_id: int, at: datetime) -> bool:
    """CAS the poller row matched by ``rows`` to a newly queued round at ``at``; send it once committed."""
    token = uuid.uuid4().hex
    won = SitePoller.objects.filter(rows).update(
        lease_owner=f"queued:{token}",
        next_round_at=at,
        wanted_at=None,
        lease_expires_at=at + timedelta(seconds=QUEUE_GRACE_S),
    )
    if won:
        countdown = max(0.0, (at - timezone.now()).total_seconds())
        transaction.on_commit(
            lambda: current_app.send_task(POLL_TASK, args=[site_id, token], countdown=countdown), robust=True
        )
    return bool(won)


def poller_round(site_id: int, token: str | None = None) -> str:
    """Run one round of the site's poller if it is this round's turn. Returns what happened, for the task log."""
    run_id = f"run:{uuid.uuid4().hex}"
    now = timezone.now()
    free = Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=now)
    if token:
        free |= Q(lease_owner=f"queued:{token}")
    claimed = SitePoller.objects.filter(free, pk=site_id).update(
        lease_owner=run_id,
        lease_expires_at=now + timedelta(seconds=ROUND_LEASE_S),
        last_round_at=now,
        rounds=F("rounds") + 1,
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
    site = Site.objects.filter(pk=site_id).first()
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
        for guard in batch.guards:
            guard_finish(guard)
    rows = list(
        TaggedCheckpoint.objects.filter(site_id=site_id, status__in=INSERTED)
        .select_related("guard")
        .order_by("guard__requested_at", "pk")
    )
    if not rows:
        return RoundReport(inserted=batch.inserted, ended=batch.ended, requests=batch.calls)
    if site is None or not site.enabled:
        error = "the protected site's ZVM is not configured (or is disabled) here"
        for row in rows:
            row_finish(row.pk, row.guard, TaggedCheckpoint.Status.FAILED, error=error)
        _finish_guards(rows)
        return RoundReport(ended=len(rows) + batch.ended)
    # A long round (many VPGs under the site's request cap) must not let its guards look abandoned.
    ChangeGuard.objects.filter(pk__in={r.guard_id for r in rows}, lease_owner=POLLER_OWNER).update(
        lease_expires_at=timezone.now() + timedelta(seconds=ROUND_LEASE_S + POLLER_GRACE_S)
    )
    client = site_client(site)
    offset = client.clock_offset()
    offset_s = offset.offset_s if offset is not None else site_clock_offset_s(site)
    report = SiteRound(site, client, offset_s, renew).run(rows)
    site_record_clock(site=site, measured=client.clock_offset())
    SitePoller.objects.filter(pk=site_id, lease_owner=run_id).update(last_error=report.error[:2000])
    # Only a guard a row of which ended here can have become finished (one query per guard).
    _finish_guards([r for r in rows if r.guard_id in report.ended_guards])
    report.inserted = batch.inserted
    report.ended += batch.ended
    report.requests += batch.calls
    return report


def _finish_guards(rows: list[TaggedCheckpoint]) -> None:
    for guard in guards_of(rows):
        guard_finish(guard)


def _schedule_next(site_id: int, run_id: str, report: RoundReport) -> None:
    """Queue the next round at the earliest time a row of the site is due, or end the chain."""
    for _ in range(_CAS_TRIES):
        poller = SitePoller.objects.get(pk=site_id)
        if poller.lease_owner != run_id:
            return  # our lease ran out and another round took over
        waiting = TaggedCheckpoint.objects.filter(site_id=site_id, status__in=INSERTED)
        due = waiting.aggregate(at=Min("next_poll_at"))["at"]
        if due is None and waiting.exists():
            due = timezone.now()  # a row handed over without a time: look at once
        if TaggedCheckpoint.objects.filter(batch_rows(site_id)).exists():
            due = timezone.now()  # queued guards left for the next batch
        at = min((t for t in (due, poller.wanted_at) if t is not None), default=None)
        same = Q(pk=site_id, lease_owner=run_id) & (
            Q(wanted_at=poller.wanted_at) if poller.wanted_at else Q(wanted_at__isnull=True)
        )
        if at is None:
            ended = SitePoller.objects.filter(same).update(
                lease_owner="", lease_expires_at=None, next_round_at=None, wanted_at=None
            )
            if ended:
                return
            continue
        at = max(at, timezone.now())
        if _queue_round(same, site_id, at):
            _extend_guard_leases(site_id, at)
            return
    logger.warning("poller of site %s: could not queue its next round; the sweep will restart it", site_id)


def _extend_guard_leases(site_id: int, next_round_at: datetime) -> None:
    """The guards the next round serves (waiting, or queued for its batch) stay the pollers' until then."""
    guard_ids = (
        TaggedCheckpoint.objects.filter(Q(site_id=site_id, status__in=INSERTED) | batch_rows(site_id))
        .values_list("guard_id", flat=True)
        .distinct()
    )
    ChangeGuard.objects.filter(
        Q(lease_owner=POLLER_OWNER) | Q(lease_owner__startswith=QUEUED_PREFIX), pk__in=list(guard_ids)
    ).update(lease_expires_at=next_round_at + timedelta(seconds=POLLER_GRACE_S))


def pollers_restart_stale() -> int:
    """The beat's sweep: start a round for every site with waiting rows whose poller's chain died."""
    now = timezone.now()
    waiting = Q(status__in=INSERTED) | Q(status=TaggedCheckpoint.Status.PENDING, guard__status__in=UNFINISHED)
    sites = set(TaggedCheckpoint.objects.filter(waiting, site__isnull=False).values_list("site_id", flat=True))
    alive = set(
        SitePoller.objects.filter(site_id__in=sites, lease_expires_at__gt=now).values_list("site_id", flat=True)
    )
    for site_id in sites - alive:
        poller_kick(site_id, now)
    return len(sites - alive)
