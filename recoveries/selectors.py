"""Reads (database only, never a ZVM call): the recoveries and rows the adapters look up."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Count, QuerySet

from recoveries.models import FlrSession, FlrSiteListing, RecoveryRequest
from rewind.agents.models import Agent
from rewind.checkpoints.selectors import journal_state_annotations
from rewind.gateway.models import GatewayCall
from rewind.lib.errors import NotFoundError, PermissionDeniedError
from rewind.sites.models import Site


def recovery_list(*, status: str | None = None) -> QuerySet[RecoveryRequest]:
    qs = (
        RecoveryRequest.objects.select_related("agent")
        .prefetch_related("approvals", "write_back_confirmations")
        .annotate(**journal_state_annotations())
    )
    return qs.filter(status=status) if status else qs


def recovery_get(*, recovery_id: int) -> RecoveryRequest:
    recovery = recovery_list().filter(pk=recovery_id).first()
    if recovery is None:
        raise NotFoundError(f"there is no recovery #{recovery_id}")
    return recovery


def recovery_get_for_agent(*, recovery_id: int, agent_id: int) -> RecoveryRequest:
    """One recovery of this agent; ``NotFoundError`` for another agent's (its existence is not told)."""
    recovery = (
        RecoveryRequest.objects.prefetch_related("approvals", "write_back_confirmations")
        .annotate(**journal_state_annotations())
        .filter(pk=recovery_id, agent_id=agent_id)
        .first()
    )
    if recovery is None:
        raise NotFoundError(f"you have no recovery #{recovery_id}")
    return recovery


def recovery_for_review(*, recovery_id: int) -> RecoveryRequest | None:
    return (
        RecoveryRequest.objects.select_related("agent__owner")
        .prefetch_related("approvals", "write_back_confirmations")
        .annotate(**journal_state_annotations())
        .filter(pk=recovery_id)
        .first()
    )


def recovery_approved_by(*, recovery: RecoveryRequest, user_id: int | None) -> bool:
    return recovery.approvals.filter(approver_id=user_id).exists()


def recovery_write_back_confirmed_by(*, recovery: RecoveryRequest, user_id: int | None) -> bool:
    return recovery.write_back_confirmations.filter(person_id=user_id).exists()


def recovery_site(recovery: RecoveryRequest) -> Site | None:
    """The configured site where the recovery runs (the VPG's recovery site), enabled or not."""
    return Site.objects.filter(identifier=recovery.recovery_site_identifier).first()


def site_enabled_get(*, site_pk: int) -> Site | None:
    return Site.objects.filter(pk=site_pk, enabled=True).first()


def flr_session_recorded(*, site: Site, session_id: str) -> FlrSession | None:
    """Our record of a session the ZVM lists, when this service opened it."""
    return FlrSession.objects.filter(site=site, session_id=session_id).first()


def calling_agent(*, agent_id: int) -> Agent:
    """The active agent of a verified token, or ``PermissionDeniedError``."""
    agent = Agent.objects.filter(pk=agent_id, is_active=True).first()
    if agent is None:
        raise PermissionDeniedError("this agent is disabled")
    return agent


def recoveries_awaiting_approval() -> int:
    return RecoveryRequest.objects.filter(status=RecoveryRequest.Status.PENDING).count()


def flr_sessions_live_ours_by_site() -> dict[str, int]:
    """Our FLR sessions still holding (or perhaps holding) a mount, by site name (``/metrics``)."""
    rows = (
        FlrSession.objects.filter(status__in=FlrSession.LIVE)
        .order_by()
        .values_list("site__name")
        .annotate(n=Count("id"))
    )
    return {name: n for name, n in rows}


def flr_site_listings() -> list[tuple[str, datetime, int]]:
    """``(site name, listed at, live sessions of others)`` from each site's last listing (``/metrics``)."""
    rows = FlrSiteListing.objects.order_by("site__name").values_list("site__name", "listed_at", "live_foreign")
    return list(rows)


def undone_call(r: RecoveryRequest) -> GatewayCall | None:
    """The gateway call a ``before_call`` recovery undoes, for the approver to read."""
    return GatewayCall.objects.filter(call_id=r.undo_call_id).first() if r.undo_call_id else None
