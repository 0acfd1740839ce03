"""Reads of OAuth grants and the tokens issued under them (database only)."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.utils import timezone
from oauth2_provider.models import AccessToken

from rewind.agents.models import Agent
from rewind.oauth.models import AgentGrant


def agents_for_consent(user: User) -> QuerySet[Agent]:
    """The active agents ``user`` may let a client act as: their own."""
    return Agent.objects.filter(owner=user, is_active=True).order_by("name")


def live_grant(*, user_id: int, application_id: int) -> AgentGrant | None:
    """The grant tokens of this (person, client) act under, with its agent, while both are live."""
    return (
        AgentGrant.objects.select_related("agent")
        .filter(user_id=user_id, application_id=application_id, revoked_at__isnull=True, agent__is_active=True)
        .first()
    )


def access_token_live(*, checksum: str) -> AccessToken | None:
    """The unexpired access token whose SHA-256 is ``checksum`` (tokens are stored as that only)."""
    return (
        AccessToken.objects.filter(token_checksum=checksum, expires__gt=timezone.now(), user__isnull=False)
        .only("pk", "user_id", "application_id", "expires", "scope", "resource")
        .first()
    )
