"""Guards and their tagged checkpoints in the admin: a read-only record; the site pollers are their only writers."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from rewind.checkpoints.badges import retention_badge
from rewind.checkpoints.models import ChangeGuard, SitePoller, TaggedCheckpoint
from rewind.checkpoints.selectors import (
    guard_journal_annotations,
    guard_progress,
    guards_timed_out,
    guards_waiting_for_worker,
)
from rewind.lib.admin_base import ReadOnlyAdmin, status_badge, status_column
from rewind.workers.selectors import workers_seen


class TaggedCheckpointInline(admin.TabularInline):
    model = TaggedCheckpoint
    extra = 0
    can_delete = False
    fields = readonly_fields = (
        "vpg_name",
        "outcome",
        "site",
        "recovery_site_name",
        "task_id",
        "checkpoint_identifier",
        "checkpoint_timestamp",
        "listed_late_at",
        "waited_ms",
        "leaves_journal",
        "journal_estimated_at",
        "error",
    )

    @admin.display(description="leaves the journal")
    def leaves_journal(self, obj: TaggedCheckpoint) -> str:
        badge = retention_badge(obj.leaves_journal_at, obj.left_journal_seen_at)
        if obj.journal_history_minutes is not None and obj.left_journal_seen_at is None:
            return format_html("{}<br><small>journal history {} min</small>", badge, obj.journal_history_minutes)
        return badge

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    @admin.display(description="status")
    def outcome(self, obj: TaggedCheckpoint) -> SafeString:
        return status_badge(obj.status)


class TimedOutFilter(admin.SimpleListFilter):
    """Guards with a VPG whose checkpoint was not listed in time (the dashboard's "timed out" links here)."""

    title = "a checkpoint timed out"
    parameter_name = "timed_out"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple[str, str]]:
        return [("yes", "Yes"), ("no", "No")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[ChangeGuard]) -> QuerySet[ChangeGuard]:
        if self.value() in ("yes", "no"):
            return guards_timed_out(queryset, timed_out=self.value() == "yes")
        return queryset


@admin.register(ChangeGuard)
class GuardAdmin(ReadOnlyAdmin):
    """Guards and their tagged checkpoints: a read-only record; the site pollers are their only writers."""

    list_display = [
        "id",
        "requested_at",
        "agent_name",
        "vm_name",
        "tool",
        "change_id",
        status_column(),
        "finished_at",
        "leaves_journal",
    ]
    list_filter = ["status", TimedOutFilter, "agent_name", "vm_name"]
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
        "waiting_for",
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[ChangeGuard]:
        # The first of its checkpoints to leave the journal, in the list's one query.
        return super().get_queryset(request).annotate(**guard_journal_annotations())

    @admin.display(description="first to leave the journal", ordering="leaves_journal_at")
    def leaves_journal(self, obj: ChangeGuard) -> str:
        return retention_badge(getattr(obj, "leaves_journal_at", None), getattr(obj, "left_journal_seen_at", None))

    @admin.display(description="waiting for")
    def waiting_for(self, obj: ChangeGuard) -> str:
        return guard_progress(obj.pk).waiting_for or "-"

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        # The same heartbeats an agent's waiting call reads: guards that no worker picks up are
        # a worker problem, not a ZVM one, and the operator should see that first.
        waiting = guards_waiting_for_worker()
        if waiting:
            seen = workers_seen()
            level = messages.WARNING if not seen.alive else messages.INFO
            messages.add_message(
                request, level, f"{waiting} guard(s) wait for a worker to pick them up; {seen.describe()}."
            )
        return super().changelist_view(request, extra_context)


@admin.register(SitePoller)
class SitePollerAdmin(ReadOnlyAdmin):
    """Each site's poller: who holds it, when its next round runs, and its last error."""

    list_display = ["site", "lease_owner", "next_round_at", "lease_expires_at", "rounds", "last_round_at", "last_error"]
