"""The admin's "Ask for a file back" page: a person asks for a recovery as an agent would over MCP, through
``recovery_request_create``, so it is audited in the person's name and waits for someone else's approval.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse

from recoveries.paths import MAX_PATH_LENGTH
from recoveries.services import ASK_PERMISSION, MAX_REASON_LENGTH, recovery_request_create
from rewind.lib.errors import ApplicationError

TEMPLATE = "admin/recoveries/recoveryrequest/ask.html"


class AskForm(forms.Form):
    vm = forms.CharField(label="VM", max_length=255, help_text="Its name, hostname or identifier.")
    path = forms.CharField(
        max_length=MAX_PATH_LENGTH,
        strip=False,
        help_text="The absolute guest path: /etc/nginx/nginx.conf or C:\\inetpub\\web.config (a folder with "
        "“whole folder”).",
    )
    reason = forms.CharField(
        max_length=MAX_REASON_LENGTH, widget=forms.Textarea(attrs={"rows": 3}), help_text="The approver reads it."
    )
    checkpoint = forms.CharField(
        required=False,
        max_length=255,
        help_text="A tag this service put on a checkpoint, or a checkpoint id. Leave the four below empty for the "
        "newest tagged checkpoint of the VM.",
    )
    change_id = forms.CharField(label="Change id", required=False, max_length=100, help_text="A guarded change.")
    before_call = forms.CharField(
        label="Before call",
        required=False,
        max_length=64,
        help_text="Undo a gateway call (any agent's): the newest journal checkpoint before it.",
    )
    point_in_time = forms.CharField(
        label="Point in time",
        required=False,
        max_length=64,
        help_text="Undo since a time, ISO 8601 with its zone (2026-12-01T09:30:00Z).",
    )
    recursive = forms.BooleanField(label="Whole folder", required=False, help_text="The path is a folder.")
    restore = forms.BooleanField(
        label="Write it back into the guest",
        required=False,
        help_text="Once approved and pulled, someone else reads the diff and confirms; a checkpoint is taken first.",
    )

    def service_arguments(self) -> dict[str, Any]:
        """The service's keywords: an empty optional text is not given at all."""
        data = self.cleaned_data
        optional = ("checkpoint", "change_id", "before_call", "point_in_time")
        return {
            "vm": data["vm"],
            "path": data["path"],
            "reason": data["reason"],
            "recursive": data["recursive"],
            "restore": data["restore"],
            **{name: data[name].strip() for name in optional if data[name].strip()},
        }


class AskPage:
    """The page, as part of ``RecoveryRequestAdmin``: ``ask_urls()`` goes into its ``get_urls``."""

    admin_site: admin.AdminSite
    model: Any

    def ask_urls(self) -> list[URLPattern]:
        return [path("ask/", self.admin_site.admin_view(self.ask_view), name="recoveries_recoveryrequest_ask")]

    def has_ask_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_staff and request.user.has_perm(ASK_PERMISSION))

    def ask_view(self, request: HttpRequest) -> HttpResponse:
        """GET shows the form; a POST (CSRF-checked by admin_view) asks, then opens the request's review page."""
        if not self.has_ask_permission(request):
            raise PermissionDenied
        if request.method != "POST":
            return self._ask_page(request, AskForm())
        form = AskForm(request.POST)
        if not form.is_valid():
            return self._ask_page(request, form, status=400)
        try:
            recovery = recovery_request_create(
                person=request.user, request_id=getattr(request, "id", None), **form.service_arguments()
            )
        except ApplicationError as exc:
            return self._ask_page(request, form, status=409, error=exc.message)
        messages.success(
            request,
            f"Recovery #{recovery.pk} is asked for and waits for approval: someone else must approve it.",
        )
        return HttpResponseRedirect(reverse("admin:recoveries_recoveryrequest_review", args=[recovery.pk]))

    def _ask_page(self, request: HttpRequest, form: AskForm, status: int = 200, error: str = "") -> HttpResponse:
        context = {
            **self.admin_site.each_context(request),
            "title": "Ask for a file back",
            "opts": self.model._meta,
            "form": form,
            "error": error,
        }
        return TemplateResponse(request, TEMPLATE, context, status=status)
