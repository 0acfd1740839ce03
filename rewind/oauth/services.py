"""OAuth grants: a person lets a client act as one of their agents; revoking one ends its tokens at once.
django-oauth-toolkit issues the codes and tokens; only these services record which agent they act as, or end
them.
"""

from __future__ import annotations

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone
from oauth2_provider.models import AccessToken, Application, Grant, RefreshToken

from rewind.agents.models import Agent
from rewind.audit import Actor, audit_record
from rewind.audit.actions import OAuthAction
from rewind.lib.errors import ApplicationError
from rewind.mcp import scopes
from rewind.oauth.models import AgentGrant


def _end_tokens(*, user_id: int, application_id: int) -> None:
    """End every code and token of this (person, client): the next request with one is refused."""
    Grant.objects.filter(user_id=user_id, application_id=application_id).delete()
    RefreshToken.objects.filter(user_id=user_id, application_id=application_id, revoked__isnull=True).update(
        revoked=timezone.now()
    )
    AccessToken.objects.filter(user_id=user_id, application_id=application_id).delete()


@transaction.atomic
def agent_grant_create(
    *,
    actor: Actor,
    user: User,
    application: Application,
    agent: Agent,
    granted: tuple[str, ...],
    redirect_uri: str,
    request_id: str | None = None,
) -> AgentGrant:
    """Record that ``user`` lets ``application`` act as ``agent`` with the scopes ``granted``, replacing the live
    grant of the same (person, client), whose codes and tokens end. ``ApplicationError`` when the agent is not
    the person's own active agent or no scope is granted."""
    if agent.owner_id != user.pk or not agent.is_active:
        raise ApplicationError(f"agent {agent.name} is not an active agent of {user.get_username()}")
    if not granted or set(granted) - set(scopes.ALL):
        raise ApplicationError(f"grant one or more of the scopes {', '.join(scopes.ALL)}")
    previous = (
        AgentGrant.objects.select_for_update()
        .filter(user=user, application=application, revoked_at__isnull=True)
        .first()
    )
    if previous is not None:
        _revoke(actor=actor, grant=previous, reason="replaced by a new consent", request_id=request_id)
    grant = AgentGrant.objects.create(
        agent=agent,
        user=user,
        application=application,
        client_name=application.name[:255],
        redirect_uri=redirect_uri,
        scope=" ".join(s for s in scopes.ALL if s in granted),
    )
    audit_record(
        actor=actor, action=OAuthAction.GRANT_CREATED, target=grant, data=grant.audit_data(), request_id=request_id
    )
    return grant


def _revoke(*, actor: Actor, grant: AgentGrant, reason: str, request_id: str | None) -> bool:
    now = timezone.now()
    if not AgentGrant.objects.filter(pk=grant.pk, revoked_at__isnull=True).update(
        revoked_at=now, revoked_by=actor.name[:150]
    ):
        return False
    grant.revoked_at = now
    _end_tokens(user_id=grant.user_id, application_id=grant.application_id)
    audit_record(
        actor=actor,
        action=OAuthAction.GRANT_REVOKED,
        target=grant,
        data={**grant.audit_data(), "reason": reason},
        request_id=request_id,
    )
    return True


@transaction.atomic
def agent_grant_revoke(*, actor: Actor, grant: AgentGrant, request_id: str | None = None) -> bool:
    """Revoke ``grant``: its codes and tokens end at once (they are not cached). False when it was revoked already."""
    return _revoke(actor=actor, grant=grant, reason="revoked", request_id=request_id)
