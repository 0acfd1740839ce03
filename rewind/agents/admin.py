"""Agents and their tokens in the admin: edited through the agents services; a token is shown once."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from rewind.admin_base import actor_for
from rewind.agents.models import Agent, AgentToken
from rewind.agents.services import agent_create, agent_token_issue, agent_token_revoke, agent_update


class AgentTokenInline(admin.TabularInline):
    model = AgentToken
    fields = readonly_fields = (
        "prefix",
        "label",
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
            agent = agent_update(
                actor=actor_for(request),
                agent=obj,
                owner=data["owner"],
                is_active=data["is_active"],
                description=data["description"],
            )
        else:
            agent = agent_create(
                actor=actor_for(request), name=data["name"], owner=data["owner"], description=data["description"]
            )
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
        "agent",
        "prefix",
        "label",
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
