"""Which workers are alive, from their heartbeats; whether the task queue answers, from its outages."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from rewind.workers.models import BrokerOutage, WorkerHeartbeat
from rewind.workers.services import HEARTBEAT_S

# A heartbeat older than this (three missed beats) is a worker that is stopped, hung or gone.
STALE_AFTER_S = 3 * HEARTBEAT_S


@dataclass(frozen=True)
class WorkersSeen:
    alive: int  # workers whose heartbeat is fresh
    slots: int  # their pool slots together
    newest_seen_at: datetime | None  # the freshest heartbeat of any worker, alive or not
    skewed: tuple[tuple[str, float], ...] = ()  # alive workers whose clock is off the database's: (name, offset s)

    def describe(self, now: datetime | None = None) -> str:
        """One sentence for an agent or an operator."""
        if self.alive:
            said = f"{self.alive} worker(s) alive with {self.slots} slot(s) in all"
            for name, offset in self.skewed:
                side = "ahead of" if offset > 0 else "behind"
                said += f"; {name}'s clock is {abs(offset):.0f} s {side} the database's (check its time sync)"
            return said
        if self.newest_seen_at is None:
            return "no worker has ever reported here: start one (manage.py runstack, or celery -A rewind worker)"
        ago = ((now or timezone.now()) - self.newest_seen_at).total_seconds()
        return f"no worker is alive: the last heartbeat was {ago:.0f} s ago (stopped, hung or overloaded host?)"


def workers_seen(now: datetime | None = None) -> WorkersSeen:
    now = now or timezone.now()
    rows = list(WorkerHeartbeat.objects.values_list("hostname", "seen_at", "concurrency", "clock_offset_s"))
    # A worker whose clock runs ahead writes heartbeats from the future: fresh, not stale.
    fresh = [row for row in rows if row[1] >= now - timedelta(seconds=STALE_AFTER_S)]
    newest = max((row[1] for row in rows), default=None)
    warn = float(settings.REWIND_CLOCK_SKEW_WARN_S)
    skewed = tuple((name, off) for name, _, _, off in fresh if off is not None and abs(off) > warn)
    return WorkersSeen(alive=len(fresh), slots=sum(row[2] for row in fresh), newest_seen_at=newest, skewed=skewed)


def worker_clock_offsets(now: datetime | None = None) -> list[tuple[str, float]]:
    """Each alive worker's clock offset from the database's, as it last measured it."""
    now = now or timezone.now()
    fresh = WorkerHeartbeat.objects.filter(
        seen_at__gte=now - timedelta(seconds=STALE_AFTER_S), clock_offset_s__isnull=False
    ).order_by("hostname")
    return [(name, offset) for name, offset in fresh.values_list("hostname", "clock_offset_s") if offset is not None]


def broker_outage_count() -> int:
    return BrokerOutage.objects.count()


def broker_outage_open() -> BrokerOutage | None:
    return BrokerOutage.objects.filter(ended_at__isnull=True).order_by("started_at").first()


def broker_answered_again_at() -> datetime | None:
    """When the last outage ended: a message queued before then may have been lost with it."""
    return (
        BrokerOutage.objects.filter(ended_at__isnull=False)
        .order_by("-ended_at")
        .values_list("ended_at", flat=True)
        .first()
    )


def broker_outages_between(start: datetime, end: datetime) -> list[BrokerOutage]:
    """The outages that overlap ``start``..``end``, oldest first (an open one overlaps until now); outages that
    overlap each other (two processes noticed one) are one."""
    overlapping = Q(started_at__lt=end) & (Q(ended_at__isnull=True) | Q(ended_at__gt=start))
    merged: list[BrokerOutage] = []
    for outage in BrokerOutage.objects.filter(overlapping).order_by("started_at"):
        last = merged[-1] if merged else None
        if last is not None and (last.ended_at is None or outage.started_at <= last.ended_at):
            if last.ended_at is not None and (outage.ended_at is None or outage.ended_at > last.ended_at):
                last.ended_at = outage.ended_at
            continue
        merged.append(outage)
    return merged


def broker_outage_describe(outage: BrokerOutage, now: datetime | None = None) -> str:
    """One sentence: since when (and until when) the task queue did not answer."""
    now = now or timezone.now()
    if outage.ended_at is None:
        lasted = (now - outage.started_at).total_seconds()
        return (
            f"the task queue ({outage.broker}) has not answered since {outage.started_at:%H:%M:%S} UTC ({lasted:.0f} s)"
        )
    lasted = (outage.ended_at - outage.started_at).total_seconds()
    return (
        f"the task queue ({outage.broker}) did not answer from {outage.started_at:%H:%M:%S} "
        f"to {outage.ended_at:%H:%M:%S} UTC ({lasted:.0f} s)"
    )


def broker_outages_describe(outages: Sequence[BrokerOutage], now: datetime | None = None) -> str:
    """The sentences of ``outages`` joined, "" for none."""
    return "; ".join(broker_outage_describe(o, now) for o in outages)


def broker_outages_note(start: datetime, end: datetime) -> str:
    """For a reason that ends a wait from ``start`` to ``end``: the outages in it, or "". A guard that timed out
    while the queue was down must say so, not blame the ZVM for what our own queue did."""
    outages = broker_outages_between(start, end)
    if not outages:
        return ""
    return f"{broker_outages_describe(outages, end)}, so no poll round could run meanwhile"
