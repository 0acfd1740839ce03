"""Guards and their tagged checkpoints in the admin: a read-only record; the wait task is their only writer."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from rewind.admin_base import ReadOnlyAdmin
from rewind.checkpoints.models import ChangeGuard, TaggedCheckpoint


class TaggedCheckpointInline(admin.TabularInline):
    model = TaggedCheckpoint
    extra = 0
    can_delete = False
    fields = readonly_fields = (
        "vpg_name",
        "status",
        "site",
        "recovery_site_name",
        "task_id",
        "checkpoint_identifier",
        "checkpoint_timestamp",
        "listed_late_at",
        "waited_ms",
        "error",
    )

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(ChangeGuard)
class GuardAdmin(ReadOnlyAdmin):
    """Guards and their tagged checkpoints: a read-only record; the wait task is their only writer."""

    list_display = ["id", "requested_at", "agent_name", "vm_name", "tool", "change_id", "status", "finished_at"]
    list_filter = ["status", "agent_name", "vm_name"]
    search_fields = ["vm_name", "vm_identifier", "change_id", "tag", "agent_name", "request_id"]
    date_hierarchy = "requested_at"
    inlines = [TaggedCheckpointInline]
    fields = readonly_fields = (
        "agent_name",
        "tool",
        "action",
        "vm_name",
        "vm_identifier",
        "change_id",
        "tag",
        "status",
        "error",
        "request_id",
        "timeout_s",
        "requested_at",
        "started_at",
        "finished_at",
        "attempts",
    )
