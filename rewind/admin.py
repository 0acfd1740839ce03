from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from rewind.admin_base import ReadOnlyAdmin
from rewind.agents import agent_create, agent_token_issue, agent_token_revoke, agent_update
from rewind.audit import Actor
from rewind.checkpoints import admin as checkpoints_admin  # noqa: F401  (registers guards)
from rewind.models import Agent, AgentToken, AuditEvent, Site
from rewind.sites import clock_skew_warning, site_check, site_create, site_update

admin.site.site_header = "zerto-rewind"
admin.site.site_title = "zerto-rewind"
admin.site.index_title = "Operations"


def actor_for(request: HttpRequest) -> Actor:
    return Actor.user(request.user.get_username())


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
        fields = ["name", "base_url", "username", "password", "client_id", "client_secret", "verify_tls", "ca_bundle", "enabled",
                  "max_requests_per_s"]


@admin.register(Site)
class SiteAdmin(admin.ModelAdmin):
    form = SiteForm
    list_display = ["name", "base_url", "site_type", "version", "identifier", "enabled", "identity_checked_at", "clock",
                    "last_error"]
    list_filter = ["enabled", "site_type"]
    search_fields = ["name", "base_url", "identifier"]
    readonly_fields = ["identifier", "site_type", "version", "identity_checked_at", "clock", "clock_checked_at",
                       "last_error"]
    actions = ["test_connection"]

    @admin.display(description="ZVM clock vs ours", ordering="clock_offset_s")
    def clock(self, obj: Site) -> str:
        if obj.clock_offset_s is None:
            return "not measured"
        warning = clock_skew_warning(obj.clock_offset_s)
        return f"{obj.clock_offset_s:+.1f} s" + (f" ⚠ {warning}" if warning else "")

    def save_model(self, request: HttpRequest, obj: Site, form: Any, change: bool) -> None:
        data = form.cleaned_data
        fields = {k: data[k] for k in ("name", "base_url", "username", "client_id", "verify_tls", "ca_bundle", "enabled",
                                       "max_requests_per_s")}
        if change:
            site = Site.objects.get(pk=obj.pk)
            site_update(
                actor=actor_for(request),
                site=site,
                password=data["password"] or None,
                client_secret=data["client_secret"] or None,
                **fields,
            )
        else:
            site = site_create(actor=actor_for(request), password=data["password"], client_secret=data["client_secret"], **fields)
        obj.pk = site.pk

    @admin.action(description="Test connection (log in, read identity, count VPGs)")
    def test_connection(self, request: HttpRequest, queryset: QuerySet[Site]) -> None:
        for site in queryset:
            result = site_check(site=site, actor=actor_for(request))
            if result.ok and result.local is not None:
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


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ["seq", "time", "actor_type", "actor", "action", "target_type", "target_repr", "request_id"]
    list_filter = ["actor_type", "action"]
    search_fields = ["actor", "action", "target_id", "target_repr", "request_id"]
    ordering = ["-seq"]
    show_full_result_count = False


# --- agents and their tokens ---------------------------------------------------------------
class AgentTokenInline(admin.TabularInline):
    model = AgentToken
    fields = readonly_fields = (
        "prefix", "label", "created_at", "created_by", "expires_at", "last_used_at", "revoked_at",
    )
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False  # tokens are issued with the "Issue a new token" action, which shows the token once


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    list_display = ["name", "owner", "is_active", "description", "created_at"]
    list_filter = ["is_active"]
    search_fields = ["name", "description", "owner__username"]
    fields = ["name", "owner", "is_active", "description"]
    inlines = [AgentTokenInline]
    actions = ["issue_token"]

    def get_readonly_fields(self, request: HttpRequest, obj: Agent | None = None) -> list[str]:
        return ["name"] if obj is not None else []  # checkpoint tags already carry the name

    def save_model(self, request: HttpRequest, obj: Agent, form: Any, change: bool) -> None:
        data = form.cleaned_data
        if change:
            agent = agent_update(actor=actor_for(request), agent=obj, owner=data["owner"],
                                 is_active=data["is_active"], description=data["description"])
        else:
            agent = agent_create(actor=actor_for(request), name=data["name"], owner=data["owner"],
                                 description=data["description"])
            if not data["is_active"]:
                agent = agent_update(actor=actor_for(request), agent=agent, is_active=False)
        obj.pk = agent.pk

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False  # deactivate instead: audit rows and tags keep naming the agent

    @admin.action(description="Issue a new token (shown once)")
    def issue_token(self, request: HttpRequest, queryset: QuerySet[Agent]) -> None:
        for agent in queryset:
            issued = agent_token_issue(actor=actor_for(request), agent=agent, label="issued in the admin")
            self.message_user(
                request,
                f"New token for {agent.name} — copy it now, it is not stored and will not be shown again: "
                f"{issued.token}",
                messages.WARNING,
            )


@admin.register(AgentToken)
class AgentTokenAdmin(admin.ModelAdmin):
    list_display = ["agent", "prefix", "label", "created_at", "expires_at", "last_used_at", "revoked_at"]
    list_filter = ["agent"]
    search_fields = ["agent__name", "prefix", "label"]
    list_select_related = ["agent"]
    fields = readonly_fields = (
        "agent", "prefix", "label", "created_at", "created_by", "expires_at", "last_used_at", "revoked_at",
    )
    actions = ["revoke"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    @admin.action(description="Revoke the selected tokens")
    def revoke(self, request: HttpRequest, queryset: QuerySet[AgentToken]) -> None:
        revoked = sum(agent_token_revoke(actor=actor_for(request), token=t) for t in queryset.select_related("agent"))
        self.message_user(request, f"{revoked} token(s) revoked; running servers refuse them within the token cache time.",
                          messages.SUCCESS)
