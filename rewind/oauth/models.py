from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models

from rewind.agents.models import Agent


class AgentGrant(models.Model):
    """A person let an OAuth client act as one of their agents, with these scopes. One live grant per (person,
    client): a new consent replaces it and ends its tokens. A token finds its agent through its pair's live
    grant; a token whose pair has none is refused."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="oauth_grants")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="agent_grants",
        help_text="The person who consented; signs in with their own account.",
    )
    application = models.ForeignKey(
        settings.OAUTH2_PROVIDER_APPLICATION_MODEL,
        on_delete=models.CASCADE,
        related_name="agent_grants",
        verbose_name="OAuth client",
    )
    client_name = models.CharField(max_length=255, blank=True, help_text="As the client named itself at consent.")
    redirect_uri = models.TextField(help_text="Where the consent sent the person back to.")
    scope = models.TextField(help_text="The scopes granted, separated by spaces.")
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_by = models.CharField(max_length=150, blank=True, editable=False)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "OAuth grant"
        constraints = [
            models.UniqueConstraint(
                fields=["user", "application"],
                condition=models.Q(revoked_at__isnull=True),
                name="one_live_grant_per_person_and_client",
            )
        ]

    def __str__(self) -> str:
        return f"{self.client_name or self.application.client_id} as {self.agent.name}"

    def audit_data(self) -> dict[str, Any]:
        return {
            "agent": self.agent.name,
            "person": self.user.get_username(),
            "client_id": self.application.client_id,
            "client_name": self.client_name,
            "redirect_uri": self.redirect_uri,
            "scope": self.scope,
        }
