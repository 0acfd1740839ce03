"""Which workers are alive, from their heartbeats."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.utils import timezone

from rewind.workers.models import WorkerHeartbeat
from rewind.workers.services import HEARTBEAT_S

# A heartbeat older than this (three missed beats) is a worker that is stopped, hung or gone.
STALE_AFTER_S = 3 * HEARTBEAT_S


@dataclass(frozen=True)
class WorkersSeen:
    alive: int  # workers whose heartbeat is fresh
    slots: int  # their pool slots together
    newest_seen_at: datetime | None  # the freshest heartbeat of any worker, alive or not

    def describe(self, now: datetime | None = None) -> str:
        """One sentence for an agent or an operator."""
        if self.alive:
            return f"{self.alive} worker(s) alive with {self.slots} slot(s) in all"
        if self.newest_seen_at is None:
            return "no worker has ever reported here: start one (manage.py runstack, or celery -A rewind worker)"
        ago = ((now or timezone.now()) - self.newest_seen_at).total_seconds()
        return f"no worker is alive: the last heartbeat was {ago:.0f} s ago (stopped, hung or overloaded host?)"


def workers_seen(now: datetime | None = None) -> WorkersSeen:
    now = now or timezone.now()
    rows = list(WorkerHeartbeat.objects.values_list("seen_at", "concurrency"))
    fresh = [c for seen, c in rows if seen >= now - timedelta(seconds=STALE_AFTER_S)]
    newest = max((seen for seen, _ in rows), default=None)
    return WorkersSeen(alive=len(fresh), slots=sum(fresh), newest_seen_at=newest)
