"""Sites in the admin: edited through the sites services, with a "Test connection" action."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html

from rewind.lib.admin_base import actor_for, status_badge
from rewind.lib.errors import field_checked
from rewind.sites.models import Site
from rewind.sites.selectors import site_get
from rewind.sites.services import (
    clock_skew_warning,
    site_availability_text,
    site_base_url_clean,
    site_create,
    site_update,
    sites_check,
)


class SiteForm(forms.ModelForm):
    # Write-only: the stored value is never sent back to the browser.
    password = forms.CharField(
        widget=forms.PasswordInput(render_value=False),
        required=False,
        help_text="Leave empty to keep the stored password.",
    )
    client_secret = forms.CharField(
        widget=forms.PasswordInput(render_value=False),
        required=False,
        help_text="Only for a custom Keycloak client (client-credentials grant). Leave empty to keep.",
    )

    class Meta:
        model = Site
        fields = [
            "name",
            "base_url",
            "username",
            "password",
            "client_id",
            "client_secret",
            "verify_tls",
            "ca_bundle",
            "enabled",
            "max_requests_per_s",
        ]

    def clean_base_url(self) -> str:
        return field_checked(site_base_url_clean, self.cleaned_data["base_url"], forms.ValidationError)


@admin.register(Site)
class SiteAdmin(admin.ModelAdmin):
    form = SiteForm
    list_display = [
        "name",
        "base_url",
        "status",
        "site_type",
        "version",
        "identifier",
        "enabled",
        "identity_checked_at",
        "clock",
        "last_error",
    ]
    list_filter = ["enabled", "site_type"]
    search_fields = ["name", "base_url", "identifier"]
    readonly_fields = [
        "status",
        "identifier",
        "site_type",
        "version",
        "identity_checked_at",
        "clock",
        "clock_checked_at",
        "last_error",
    ]
    actions = ["test_connection", "test_connection_now"]

    @admin.display(description="ZVM clock vs ours", ordering="clock_offset_s")
    def clock(self, obj: Site) -> str:
        if obj.clock_offset_s is None:
            return "not measured"
        warning = clock_skew_warning(obj.clock_offset_s)
        return f"{obj.clock_offset_s:+.1f} s" + (f" ⚠ {warning}" if warning else "")

    @admin.display(description="Status")
    def status(self, obj: Site) -> str:
        """available / unavailable since T: reason (the site's circuit, shared by every process)."""
        if obj.pk is None:
            return "-"
        text = site_availability_text(obj)
        word = text if text in ("available", "disabled") else "unavailable"
        return format_html("{} {}", status_badge(word), text.removeprefix(word).strip())

    def save_model(self, request: HttpRequest, obj: Site, form: Any, change: bool) -> None:
        data = form.cleaned_data
        fields = {
            k: data[k]
            for k in (
                "name",
                "base_url",
                "username",
                "client_id",
                "verify_tls",
                "ca_bundle",
                "enabled",
                "max_requests_per_s",
            )
        }
        if change:
            site = site_update(
                actor=actor_for(request),
                site=site_get(obj.pk),
                password=data["password"] or None,
                client_secret=data["client_secret"] or None,
                **fields,
            )
        else:
            site = site_create(
                actor=actor_for(request), password=data["password"], client_secret=data["client_secret"], **fields
            )
        obj.pk = site.pk

    @admin.action(description="Test connection (log in, read identity, count VPGs)")
    def test_connection(self, request: HttpRequest, queryset: QuerySet[Site]) -> None:
        """A site marked unavailable is not asked before its next trial: it says since when, at once."""
        self._check(request, queryset, force=False)

    @admin.action(description="Test connection now, even if marked unavailable (waits up to the ZVM timeouts)")
    def test_connection_now(self, request: HttpRequest, queryset: QuerySet[Site]) -> None:
        self._check(request, queryset, force=True)

    def _check(self, request: HttpRequest, queryset: QuerySet[Site], *, force: bool) -> None:
        # Every site at once: one hung site costs the page its own wait, not one per site.
        for outcome in sites_check(sites=list(queryset), actor=actor_for(request), force=force):
            site, result = outcome.site, outcome.value
            if result is None:
                self.message_user(request, f"{site.name}: {outcome.error}", messages.ERROR)
            elif result.ok and result.local is not None:
                self.message_user(
                    request,
                    f"{site.name}: OK — {result.local.name} ({result.local.type} {result.local.version}), "
                    f"{result.vpg_count} VPGs",
                    messages.SUCCESS,
                )
                if warning := clock_skew_warning(result.site.clock_offset_s):
                    self.message_user(request, f"{site.name}: {warning}", messages.WARNING)
            else:
                self.message_user(request, f"{site.name}: {result.error}", messages.ERROR)
