"""Worker heartbeats: the only writer of ``WorkerHeartbeat`` rows."""

from __future__ import annotations

import logging
import os
import threading
from datetime import datetime, timedelta

from django.db import DatabaseError, connection
from django.utils import timezone

from rewind.workers.models import WorkerHeartbeat

logger = logging.getLogger(__name__)

HEARTBEAT_S = 5.0
PRUNE_AFTER = timedelta(days=1)


def worker_heartbeat_record(*, hostname: str, concurrency: int, started_at: datetime, pid: int | None = None) -> None:
    now = timezone.now()
    WorkerHeartbeat.objects.update_or_create(
        hostname=hostname,
        defaults={"pid": pid or os.getpid(), "concurrency": concurrency, "started_at": started_at, "seen_at": now},
    )
    WorkerHeartbeat.objects.filter(seen_at__lt=now - PRUNE_AFTER).delete()


def worker_heartbeat_remove(*, hostname: str) -> None:
    WorkerHeartbeat.objects.filter(hostname=hostname).delete()


def worker_heartbeat_start(*, hostname: str, concurrency: int) -> threading.Event:
    """Write this worker's heartbeat now and every ``HEARTBEAT_S`` from a daemon thread; set the event to stop.

    A thread of the worker's main process, not a task: a task would tell whether a pool slot
    is free, and a saturated worker is still alive. A stopped or hung process writes nothing,
    which is exactly what the readers must see.
    """
    stop = threading.Event()
    started_at = timezone.now()

    def beat() -> None:
        try:
            while True:
                try:
                    worker_heartbeat_record(hostname=hostname, concurrency=concurrency, started_at=started_at)
                except DatabaseError:
                    logger.warning("worker %s: could not write its heartbeat; retrying", hostname, exc_info=True)
                if stop.wait(HEARTBEAT_S):
                    return
        finally:
            connection.close()

    threading.Thread(target=beat, name="rewind-worker-heartbeat", daemon=True).start()
    return stop
