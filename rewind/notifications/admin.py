"""Notification deliveries in the admin: read-only, under the channels they go to, with "send a test notification"."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import URLPattern, path, reverse

from rewind.lib.admin_base import ReadOnlyAdmin, actor_for
from rewind.lib.errors import ApplicationError
from rewind.notifications.models import NotificationDelivery
from rewind.notifications.selectors import channel_views
from rewind.notifications.services import notification_test_send

TEST_PERMISSION = "rewind.send_test_notification"


@admin.register(NotificationDelivery)
class NotificationDeliveryAdmin(ReadOnlyAdmin):
    # What was told to whom sits beside the audit log on the admin index (rewind.dashboard.grouping).
    operator_group = "audit"
    list_display = ["created_at", "kind", "status", "channel_label", "attempts", "title", "last_error", "finished_at"]
    list_filter = ["status", "kind"]
    search_fields = ["dedupe_key", "title", "channel_label", "target_id", "request_id"]
    change_list_template = "admin/rewind/notificationdelivery/change_list.html"
    show_full_result_count = False

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        context = {
            **(extra_context or {}),
            "channels": channel_views(),
            "can_test": request.user.has_perm(TEST_PERMISSION),
        }
        return super().changelist_view(request, context)

    def get_urls(self) -> list[URLPattern]:
        own = [
            path("test/", self.admin_site.admin_view(self.test_view), name="rewind_notificationdelivery_test"),
        ]
        return own + super().get_urls()

    def test_view(self, request: HttpRequest) -> HttpResponse:
        """POST only: queue a test message to one channel (``channel``, a key) or to all of them."""
        back = reverse("admin:rewind_notificationdelivery_changelist")
        if request.method != "POST":
            return HttpResponseRedirect(back)
        if not request.user.has_perm(TEST_PERMISSION):
            raise PermissionDenied
        try:
            count = notification_test_send(
                actor=actor_for(request),
                channel=request.POST.get("channel") or None,
                request_id=getattr(request, "id", None),
            )
        except ApplicationError as exc:
            self.message_user(request, exc.message, messages.ERROR)
        else:
            self.message_user(
                request,
                f"A test notification is queued for {count} channel(s); its deliveries are listed below.",
                messages.SUCCESS,
            )
        return HttpResponseRedirect(back)
