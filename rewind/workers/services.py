"""Worker heartbeats and task-queue outages: the only writer of ``WorkerHeartbeat`` and ``BrokerOutage`` rows."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import DatabaseError, IntegrityError, connection, transaction
from django.utils import timezone

from rewind.lib.dbclock import database_now
from rewind.workers.models import BrokerOutage, WorkerHeartbeat

logger = logging.getLogger(__name__)

HEARTBEAT_S = 5.0
PRUNE_AFTER = timedelta(days=1)
OUTAGES_KEPT = timedelta(days=30)


def worker_heartbeat_record(*, hostname: str, concurrency: int, started_at: datetime, pid: int | None = None) -> None:
    now = timezone.now()
    offset = (now - database_now()).total_seconds()  # a worker whose clock drifted is shown as such
    WorkerHeartbeat.objects.update_or_create(
        hostname=hostname,
        defaults={
            "pid": pid or os.getpid(),
            "concurrency": concurrency,
            "started_at": started_at,
            "seen_at": now,
            "clock_offset_s": round(offset, 3),
        },
    )
    WorkerHeartbeat.objects.filter(seen_at__lt=now - PRUNE_AFTER).delete()


def worker_heartbeat_remove(*, hostname: str) -> None:
    WorkerHeartbeat.objects.filter(hostname=hostname).delete()


def broker_outage_noticed(*, broker: str, error: str, noticed_by: str) -> bool:
    """Record that the task queue does not answer, unless an outage is open already; True if this opened it. Safe
    from every process at once: the database lets one open outage per broker."""
    if BrokerOutage.objects.filter(ended_at__isnull=True).exists():
        return False
    try:
        with transaction.atomic():
            BrokerOutage.objects.create(
                broker=broker[:255], started_at=timezone.now(), error=error[:1000], noticed_by=noticed_by[:255]
            )
    except IntegrityError:
        return False  # another process opened it first
    logger.warning("the task queue (%s) does not answer: %s", broker, error)
    return True


def broker_outage_ended() -> BrokerOutage | None:
    """The task queue answered: close the open outage. Returns it when this call closed it, else None."""
    outage = BrokerOutage.objects.filter(ended_at__isnull=True).order_by("started_at").first()
    if outage is None:
        return None
    now = timezone.now()
    if not BrokerOutage.objects.filter(pk=outage.pk, ended_at__isnull=True).update(ended_at=now):
        return None  # another process closed it
    BrokerOutage.objects.filter(ended_at__lt=now - OUTAGES_KEPT).delete()
    outage.ended_at = now
    logger.warning(
        "the task queue (%s) answers again after %.0f s", outage.broker, (now - outage.started_at).total_seconds()
    )
    return outage


def broker_reconnected(*, broker: str, lost_at: datetime, noticed_by: str) -> None:
    """A worker's connection to the task queue broke at ``lost_at`` and is back: that was an outage, closed now (or
    recorded closed), since a broker that restarts between two heartbeats may have lost what was queued, and the
    pollers queue their rounds anew after the last outage ended."""
    BrokerOutage.objects.filter(ended_at__isnull=True, started_at__gt=lost_at).update(started_at=lost_at)
    if broker_outage_ended() is not None:
        return  # a probe had noticed it: now it has its true start and its end
    if BrokerOutage.objects.filter(ended_at__gte=lost_at).exists():
        return  # another worker, or a probe, recorded it already
    BrokerOutage.objects.create(
        broker=broker[:255],
        started_at=lost_at,
        ended_at=timezone.now(),
        error="the worker's connection to it broke",
        noticed_by=noticed_by[:255],
    )
    logger.warning("the task queue (%s) was out of reach of %s since %s", broker, noticed_by, lost_at)


@dataclass(frozen=True)
class BrokerProbe:
    """How a worker asks its broker whether it answers: ``ask`` returns None when it did, else what went wrong."""

    broker: str
    ask: Callable[[], str | None]


def _probe_broker(probe: BrokerProbe, hostname: str) -> None:
    error = probe.ask()
    if error is None:
        broker_outage_ended()
    else:
        broker_outage_noticed(broker=probe.broker, error=error, noticed_by=hostname)


def worker_heartbeat_start(*, hostname: str, concurrency: int, probe: BrokerProbe | None = None) -> threading.Event:
    """Write this worker's heartbeat now and every ``HEARTBEAT_S`` from a daemon thread; set the event to stop.

    A thread of the main process, not a task: a task would tell whether a pool slot is free, and a saturated
    worker is still alive, while a stopped or hung one writes nothing. With a ``probe`` it also asks the broker
    every beat, which a task could not: it needs the broker to run.
    """
    stop = threading.Event()
    started_at = timezone.now()

    def beat() -> None:
        try:
            while True:
                # A connection a database restart broke stays broken until closed: Django closes
                # such connections between requests only, and this thread has none (once seen: a
                # worker alive after a PostgreSQL restart, read as dead for good).
                connection.close_if_unusable_or_obsolete()
                try:
                    worker_heartbeat_record(hostname=hostname, concurrency=concurrency, started_at=started_at)
                except DatabaseError:
                    logger.warning("worker %s: could not write its heartbeat; retrying", hostname, exc_info=True)
                if probe is not None:
                    try:
                        _probe_broker(probe, hostname)
                    except Exception:  # the thread must outlive any failure: it is how the worker is seen alive
                        logger.warning("worker %s: could not record the task queue's state", hostname, exc_info=True)
                if stop.wait(HEARTBEAT_S):
                    return
        finally:
            connection.close()

    threading.Thread(target=beat, name="rewind-worker-heartbeat", daemon=True).start()
    return stop
