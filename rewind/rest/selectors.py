"""Querysets behind the rewind REST API (reads only; no state changes here)."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Prefetch, QuerySet

from rewind.errors import NotFoundError
from rewind.models import Agent, AgentToken, AuditEvent, Site


def audit_event_list(
    *,
    request_id: str | None = None,
    action: str | None = None,
    actor: str | None = None,
    actor_type: str | None = None,
    target_type: str | None = None,
    target_id: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> QuerySet[AuditEvent]:
    """Audit events matching every given filter (exact matches; ``since`` inclusive, ``until`` exclusive)."""
    qs = AuditEvent.objects.all()
    exact = {"request_id": request_id, "action": action, "actor": actor, "actor_type": actor_type,
             "target_type": target_type, "target_id": target_id}
    qs = qs.filter(**{k: v for k, v in exact.items() if v})
    if since is not None:
        qs = qs.filter(time__gte=since)
    if until is not None:
        qs = qs.filter(time__lt=until)
    return qs.order_by("-seq")


def audit_event_get(seq: int) -> AuditEvent:
    event = AuditEvent.objects.filter(seq=seq).first()
    if event is None:
        raise NotFoundError(f"there is no audit event #{seq}")
    return event


def site_list() -> QuerySet[Site]:
    return Site.objects.order_by("name")


def site_get(pk: int) -> Site:
    site = Site.objects.filter(pk=pk).first()
    if site is None:
        raise NotFoundError(f"there is no site #{pk}")
    return site


def agent_list() -> QuerySet[Agent]:
    return (
        Agent.objects.select_related("owner")
        .prefetch_related(Prefetch("tokens", queryset=AgentToken.objects.order_by("-created_at", "-pk")))
        .order_by("name")
    )


def agent_get(pk: int) -> Agent:
    agent = agent_list().filter(pk=pk).first()
    if agent is None:
        raise NotFoundError(f"there is no agent #{pk}")
    return agent


def agent_token_get(*, agent: Agent, token_id: int) -> AgentToken:
    token = AgentToken.objects.select_related("agent").filter(agent=agent, pk=token_id).first()
    if token is None:
        raise NotFoundError(f"agent {agent.name} has no token #{token_id}")
    return token
