"""Workers and task-queue outages in the admin: read-only, from their heartbeats and probes."""

from __future__ import annotations

from django.contrib import admin
from django.utils import timezone

from rewind.lib.admin_base import ReadOnlyAdmin
from rewind.workers.models import BrokerOutage, WorkerHeartbeat
from rewind.workers.selectors import STALE_AFTER_S


@admin.register(WorkerHeartbeat)
class WorkerHeartbeatAdmin(ReadOnlyAdmin):
    list_display = ["hostname", "alive", "seen_at", "clock_offset_s", "concurrency", "pid", "started_at"]

    @admin.display(boolean=True, description="alive")
    def alive(self, obj: WorkerHeartbeat) -> bool:
        return (timezone.now() - obj.seen_at).total_seconds() <= STALE_AFTER_S


@admin.register(BrokerOutage)
class BrokerOutageAdmin(ReadOnlyAdmin):
    list_display = ["broker", "started_at", "ended_at", "lasted", "noticed_by", "error"]

    @admin.display(description="lasted")
    def lasted(self, obj: BrokerOutage) -> str:
        end = obj.ended_at or timezone.now()
        return f"{(end - obj.started_at).total_seconds():.0f} s" + ("" if obj.ended_at else " so far")
