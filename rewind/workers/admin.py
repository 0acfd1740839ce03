"""Workers in the admin: read-only, from their heartbeats."""

from __future__ import annotations

from django.contrib import admin
from django.utils import timezone

from rewind.admin_base import ReadOnlyAdmin
from rewind.workers.models import WorkerHeartbeat
from rewind.workers.selectors import STALE_AFTER_S


@admin.register(WorkerHeartbeat)
class WorkerHeartbeatAdmin(ReadOnlyAdmin):
    list_display = ["hostname", "alive", "seen_at", "concurrency", "pid", "started_at"]

    @admin.display(boolean=True, description="alive")
    def alive(self, obj: WorkerHeartbeat) -> bool:
        return (timezone.now() - obj.seen_at).total_seconds() <= STALE_AFTER_S
