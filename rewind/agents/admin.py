"""Agents and their tokens in the admin: edited through the agents services; a token is shown once. "Connect an
agent" is ``manage.py mcpconfig`` in the browser: a POST issues a token and shows a client's configuration with
it, once.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.cache import add_never_cache_headers

from rewind.agents.limits import FIELDS as LIMIT_FIELDS
from rewind.agents.limits import VmLimit
from rewind.agents.models import Agent, AgentToken
from rewind.agents.selectors import agent_get
from rewind.agents.services import (
    agent_create,
    agent_token_issue_by_name,
    agent_token_revoke,
    agent_update,
    expiry_in_days,
)
from rewind.lib.admin_base import actor_for
from rewind.lib.errors import ApplicationError, NotFoundError
from rewind.mcp import scopes
from rewind.mcp.clientconfig import CLIENT_TITLES, OAUTH_ONLY, client_config
from rewind.mcp.endpoint import mcp_public_url

# What the REST API asks of whoever issues a token; the page and the action ask the same.
ISSUE_TOKEN_PERMISSION = "rewind.add_agenttoken"


class AgentTokenInline(admin.TabularInline):
    model = AgentToken
    fields = readonly_fields = (
        "prefix",
        "label",
        "scope",
        "created_at",
        "created_by",
        "expires_at",
        "last_used_at",
        "revoked_at",
    )
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False  # tokens are issued by "Connect an agent" or the "Issue a new token" action, shown once


class ConnectForm(forms.Form):
    client = forms.ChoiceField(
        choices=list(CLIENT_TITLES.items()),
        widget=forms.RadioSelect,
        help_text="The MCP client the agent runs in; the configuration is in the form it accepts as is.",
    )
    oauth = forms.BooleanField(
        label="No token: the client signs in with OAuth",
        required=False,
        help_text="The client gets only the URL; when it connects, a person signs in and picks the agent. "
        "The connectors of claude.ai and ChatGPT work only this way.",
    )
    expires_days = forms.IntegerField(
        label="Token expires after (days)",
        required=False,
        min_value=1,
        max_value=3650,
        help_text="Leave empty for a token that does not expire.",
    )
    granted = forms.MultipleChoiceField(
        label="The token may",
        required=False,
        choices=[(s, f"{s}: {d}") for s, d in scopes.DESCRIPTIONS.items()],
        initial=list(scopes.ALL),
        widget=forms.CheckboxSelectMultiple,
    )

    def wants_token(self) -> bool:
        return not (self.cleaned_data["oauth"] or self.cleaned_data["client"] in OAUTH_ONLY)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("client") and not (data.get("oauth") or data["client"] in OAUTH_ONLY) and not data.get("granted"):
            self.add_error("granted", "Tick at least one thing the token may do.")
        return data


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    list_display = ["name", "owner", "is_active", "vm_limit", "description", "created_at"]
    list_filter = ["is_active"]
    search_fields = ["name", "description", "owner__username"]
    fieldsets = [
        (None, {"fields": ["name", "owner", "is_active", "description", "changes_need_approval"]}),
        (
            "VM limit",
            {
                "fields": list(LIMIT_FIELDS),
                "description": "The VMs this agent (every token and OAuth grant of it) may guard, recover from and "
                "reach through the gateway. Each kind you fill in narrows it; empty: every VM.",
            },
        ),
    ]
    inlines = [AgentTokenInline]
    actions = ["issue_token"]
    change_form_template = "admin/rewind/agent/change_form.html"

    @admin.display(description="VM limit")
    def vm_limit(self, obj: Agent) -> str:
        return VmLimit.of(obj).describe()

    def get_readonly_fields(self, request: HttpRequest, obj: Agent | None = None) -> list[str]:
        return ["name"] if obj is not None else []  # checkpoint tags already carry the name

    def save_model(self, request: HttpRequest, obj: Agent, form: Any, change: bool) -> None:
        data = form.cleaned_data
        if change:
            agent = agent_update(
                actor=actor_for(request),
                agent=obj,
                owner=data["owner"],
                is_active=data["is_active"],
                description=data["description"],
                changes_need_approval=data["changes_need_approval"],
                **{f: data[f] for f in LIMIT_FIELDS},
            )
        else:
            agent = agent_create(
                actor=actor_for(request), name=data["name"], owner=data["owner"], description=data["description"]
            )
            later = {f: data[f] for f in LIMIT_FIELDS if data[f]}
            if not data["is_active"]:
                later["is_active"] = False
            if data["changes_need_approval"]:
                later["changes_need_approval"] = True
            if later:
                agent = agent_update(actor=actor_for(request), agent=agent, **later)
        obj.pk = agent.pk

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False  # deactivate instead: audit rows and tags keep naming the agent

    def get_urls(self) -> list[URLPattern]:
        own = [path("<int:pk>/connect/", self.admin_site.admin_view(self.connect_view), name="rewind_agent_connect")]
        return own + super().get_urls()

    def connect_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        """GET shows the choice of client; only a POST (CSRF-checked by admin_view) issues a token."""
        if not request.user.has_perm(ISSUE_TOKEN_PERMISSION):
            raise PermissionDenied
        try:
            agent = agent_get(pk)
        except NotFoundError as exc:
            raise Http404(exc.message) from None
        context: dict[str, Any] = {
            **self.admin_site.each_context(request),
            "title": f"Connect agent {agent.name} to an MCP client",
            "opts": self.model._meta,
            "agent": agent,
        }
        if request.method != "POST":
            return self._connect_page(request, context, ConnectForm())
        form = ConnectForm(request.POST)
        if not form.is_valid():
            return self._connect_page(request, context, form, status=400)
        client = form.cleaned_data["client"]
        url = mcp_public_url(opened_at=request.build_absolute_uri("/"))
        context |= {"url": url, "url_from_setting": settings.REWIND_PUBLIC_URL_CONFIGURED, "issued": None}
        if not form.wants_token():
            context["config"] = client_config(client, url=url, token=None)
            return TemplateResponse(request, "admin/rewind/agent/connect_done.html", context)
        try:
            # The service mcpconfig uses: an inactive agent is refused here as it is there.
            made = agent_token_issue_by_name(
                actor=actor_for(request),
                name=agent.name,
                label=f"Connect an agent: {client}",
                expires_at=expiry_in_days(form.cleaned_data["expires_days"]),
                granted=tuple(form.cleaned_data["granted"]),
                request_id=getattr(request, "id", None),
            )
        except ApplicationError as exc:
            return self._connect_page(request, context, form, status=409, error=exc.message)
        context |= {"config": client_config(client, url=url, token=made.issued.token), "issued": made.issued.row}
        response = TemplateResponse(request, "admin/rewind/agent/connect_done.html", context)
        add_never_cache_headers(response)  # the page holds the token: no cache, no back-button copy
        return response

    def _connect_page(
        self, request: HttpRequest, context: dict[str, Any], form: ConnectForm, status: int = 200, error: str = ""
    ) -> HttpResponse:
        context |= {"form": form, "error": error}
        return TemplateResponse(request, "admin/rewind/agent/connect.html", context, status=status)

    def has_issue_token_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(ISSUE_TOKEN_PERMISSION)

    # Without permissions= an action is offered to anyone who may merely view the list.
    @admin.action(description="Issue a new token (shown once)", permissions=["issue_token"])
    def issue_token(self, request: HttpRequest, queryset: QuerySet[Agent]) -> HttpResponse | None:
        """Send the operator to the agent's "Connect an agent" page, which issues and shows the token once, never
        cached: a message would keep it in the message store (a cookie or the session) until displayed."""
        agents = list(queryset[:2])
        if len(agents) != 1:
            self.message_user(request, "Pick one agent: its token is shown once, on its own page.", messages.ERROR)
            return None
        return HttpResponseRedirect(reverse("admin:rewind_agent_connect", args=[agents[0].pk]))


@admin.register(AgentToken)
class AgentTokenAdmin(admin.ModelAdmin):
    list_display = ["agent", "prefix", "label", "scope", "created_at", "expires_at", "last_used_at", "revoked_at"]
    list_filter = ["agent"]
    search_fields = ["agent__name", "prefix", "label"]
    list_select_related = ["agent"]
    fields = readonly_fields = (
        "agent",
        "prefix",
        "label",
        "scope",
        "created_at",
        "created_by",
        "expires_at",
        "last_used_at",
        "revoked_at",
    )
    actions = ["revoke"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    @admin.action(description="Revoke the selected tokens")
    def revoke(self, request: HttpRequest, queryset: QuerySet[AgentToken]) -> None:
        revoked = sum(agent_token_revoke(actor=actor_for(request), token=t) for t in queryset.select_related("agent"))
        self.message_user(
            request,
            f"{revoked} token(s) revoked; running servers refuse them within the token cache time.",
            messages.SUCCESS,
        )
