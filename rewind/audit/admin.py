"""The audit log in the admin: read-only."""

from __future__ import annotations

from django.contrib import admin

from rewind.admin_base import ReadOnlyAdmin
from rewind.audit.models import AuditEvent


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ["seq", "time", "actor_type", "actor", "action", "target_type", "target_repr", "request_id"]
    list_filter = ["actor_type", "action"]
    search_fields = ["actor", "action", "target_id", "target_repr", "request_id"]
    ordering = ["-seq"]
    show_full_result_count = False
