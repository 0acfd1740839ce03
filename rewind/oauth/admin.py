"""OAuth grants in the admin: which person let which client act as which agent; revoking one ends its tokens at once."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from rewind.lib.admin_base import actor_for
from rewind.oauth.models import AgentGrant
from rewind.oauth.services import agent_grant_revoke


@admin.register(AgentGrant)
class AgentGrantAdmin(admin.ModelAdmin):
    list_display = ["agent", "client_name", "user", "scope", "redirect_uri", "created_at", "revoked_at"]
    list_filter = ["agent", ("revoked_at", admin.EmptyFieldListFilter)]
    search_fields = ["agent__name", "client_name", "user__username", "application__client_id"]
    list_select_related = ["agent", "user", "application"]
    fields = readonly_fields = (
        "agent",
        "user",
        "application",
        "client_name",
        "redirect_uri",
        "scope",
        "created_at",
        "revoked_at",
        "revoked_by",
    )
    actions = ["revoke"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # a grant is made by the person consenting, on the consent page

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False  # revoke instead: the audit names the grant

    @admin.action(description="Revoke the selected grants (their tokens stop at once)", permissions=["change"])
    def revoke(self, request: HttpRequest, queryset: QuerySet[AgentGrant]) -> None:
        grants = queryset.select_related("agent", "user", "application")
        revoked = sum(agent_grant_revoke(actor=actor_for(request), grant=g) for g in grants)
        self.message_user(
            request, f"{revoked} grant(s) revoked; their tokens are refused from now on.", messages.SUCCESS
        )
