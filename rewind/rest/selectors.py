"""Querysets behind the rewind REST API (reads only; no state changes here)."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Count, Prefetch, Q, QuerySet

from rewind.errors import NotFoundError
from rewind.models import Agent, AgentToken, AuditEvent, ChangeGuard, ChangeGuardVpg, Site


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


def guard_list(
    *, agent: str | None = None, vm: str | None = None, status: str | None = None, change_id: str | None = None
) -> QuerySet[ChangeGuard]:
    """Guards newest first with VPG counts; ``vm`` matches the VM's name or its identifier."""
    qs = ChangeGuard.objects.annotate(
        vpgs_total=Count("vpgs"),
        vpgs_listed=Count("vpgs", filter=Q(vpgs__status=ChangeGuardVpg.Status.LISTED)),
    )
    if agent:
        qs = qs.filter(agent_name=agent)
    if vm:
        qs = qs.filter(Q(vm_name=vm) | Q(vm_identifier=vm))
    if status:
        qs = qs.filter(status=status)
    if change_id:
        qs = qs.filter(change_id=change_id)
    return qs.order_by("-requested_at", "-pk")


def guard_get(pk: int) -> ChangeGuard:
    guard = (
        guard_list()
        .prefetch_related(Prefetch("vpgs", queryset=ChangeGuardVpg.objects.select_related("site").order_by("vpg_name")))
        .filter(pk=pk)
        .first()
    )
    if guard is None:
        raise NotFoundError(f"there is no guard #{pk}")
    return guard


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
