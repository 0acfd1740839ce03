"""The audit log in the admin: read-only, one screen wide, each row linking to what it is about."""

from __future__ import annotations

from urllib.parse import urlencode

from django.apps import apps
from django.contrib import admin
from django.urls import NoReverseMatch, reverse
from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe
from django.utils.text import Truncator

from rewind.audit.models import AuditEvent
from rewind.lib.admin_base import ReadOnlyAdmin

REQUEST_ID_SHOWN = 8  # enough to tell calls apart on one screen; the link filters by the whole id
TARGET_SHOWN = 90  # a guard's tag runs long; the whole text is in the link's title


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    # Five narrow columns, each two short lines, so the list fits beside the sidebar and filters.
    list_display = ["seq", "when", "who", "what", "target"]
    list_display_links = ["seq"]
    list_filter = ["actor_type", "action"]
    search_fields = ["actor", "action", "target_id", "target_repr", "request_id"]
    ordering = ["-id"]  # the order of recording: an event gets its chain position just after its commit
    show_full_result_count = False

    @admin.display(description="time (UTC)", ordering="time")
    def when(self, obj: AuditEvent) -> SafeString:
        # To the second: the events of one call share a minute.
        return format_html('{}<span class="rw-sub">{}</span>', f"{obj.time:%H:%M:%S}", f"{obj.time:%Y-%m-%d}")

    @admin.display(description="action, call", ordering="action")
    def what(self, obj: AuditEvent) -> SafeString:
        # A code breaks only at its dots: "recoveries.session.unmount_requested" stays readable.
        code = mark_safe(".<wbr>".join(escape(part) for part in obj.action.split(".")))  # each part escaped
        if not obj.request_id:
            return code
        url = reverse("admin:rewind_auditevent_changelist") + "?" + urlencode({"request_id": obj.request_id})
        return format_html(
            '{}<span class="rw-sub"><a href="{}" title="every event of this call ({})">call {}</a></span>',
            code,
            url,
            obj.request_id,
            obj.request_id[:REQUEST_ID_SHOWN],
        )

    @admin.display(description="actor", ordering="actor")
    def who(self, obj: AuditEvent) -> SafeString:
        return format_html('{}<span class="rw-sub">{}</span>', obj.actor, obj.actor_type)

    @admin.display(description="target")
    def target(self, obj: AuditEvent) -> SafeString | str:
        if not obj.target_type:
            return "-"
        text = obj.target_repr or obj.target_id
        return format_html(
            '<a href="{}" title="{}">{}</a><span class="rw-sub">{}</span>',
            self.target_url(obj),
            text,
            Truncator(text).chars(TARGET_SHOWN),
            obj.target_type,
        )

    def target_url(self, obj: AuditEvent) -> str:
        """The target's admin page; for a target without one (another operator's FLR session, a
        row shown only inside another page), the audit events about the same target."""
        try:
            model = apps.get_model(obj.target_type)
        except (LookupError, ValueError):
            model = None
        if model is not None and self.admin_site.is_registered(model):
            try:
                return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_change", args=[obj.target_id])
            except NoReverseMatch:
                pass
        query = urlencode({"target_type": obj.target_type, "target_id": obj.target_id})
        return reverse("admin:rewind_auditevent_changelist") + "?" + query
