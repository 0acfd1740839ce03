"""Reads (database only, never a ZVM call): what a recovery looks like to an approver, an agent
and the REST API, and the rows the adapters look up."""

from __future__ import annotations

import base64
from datetime import datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db.models import Count, QuerySet
from django.urls import reverse

from recoveries.models import FlrSession, FlrSiteListing, RecoveryRequest
from rewind.agents.models import Agent
from rewind.checkpoints.selectors import journal_state_annotations, journal_state_of
from rewind.errors import NotFoundError, PermissionDeniedError
from rewind.gateway.models import GatewayCall
from rewind.sites.models import Site


def recovery_list(*, status: str | None = None) -> QuerySet[RecoveryRequest]:
    qs = (
        RecoveryRequest.objects.select_related("agent")
        .prefetch_related("approvals")
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
        RecoveryRequest.objects.prefetch_related("approvals")
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
        .prefetch_related("approvals")
        .annotate(**journal_state_annotations())
        .filter(pk=recovery_id)
        .first()
    )


def recovery_approved_by(*, recovery: RecoveryRequest, user_id: int | None) -> bool:
    return recovery.approvals.filter(approver_id=user_id).exists()


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


def live_sessions_url() -> str:
    """The admin page listing every live FLR session, where a person may end any of them."""
    return settings.REWIND_PUBLIC_URL + reverse("admin:recoveries_flrsession_live")


def approval_url(recovery: RecoveryRequest) -> str:
    """The admin page where a person reviews and approves or denies the request."""
    return settings.REWIND_PUBLIC_URL + reverse("admin:recoveries_recoveryrequest_review", args=[recovery.pk])


def download_url(recovery: RecoveryRequest) -> str:
    """Authenticated download: the requesting agent's bearer token, or a staff session."""
    return settings.REWIND_PUBLIC_URL + reverse("recoveries-api:download", args=[recovery.pk])


def checkpoint_dict(r: RecoveryRequest) -> dict[str, Any]:
    journal = journal_state_of(r)
    return {
        "identifier": r.checkpoint_identifier,
        "timestamp": r.checkpoint_timestamp.isoformat() if r.checkpoint_timestamp else None,
        "tag": r.checkpoint_tag,
        "change_id": r.change_id,
        "source": r.checkpoint_source,
        "vpg_identifier": r.vpg_identifier,
        "vpg_name": r.vpg_name,
        "recovery_site": r.recovery_site_name or r.recovery_site_identifier,
        "listed_late_at": r.checkpoint_listed_late_at.isoformat() if r.checkpoint_listed_late_at else None,
        # The retention forecast of our tagged checkpoint (none for a bare journal checkpoint id).
        "leaves_journal_at": journal.leaves_at.isoformat() if journal.leaves_at else None,
        "left_journal_seen_at": journal.left_seen_at.isoformat() if journal.left_seen_at else None,
        "before_call": r.undo_call_id or None,
        "before": r.undo_before.isoformat() if r.undo_before else None,
        "before_by_s": r.undo_before_by_s,
    }


def unmount_dict(r: RecoveryRequest) -> dict[str, Any] | None:
    if r.unmount_ok is None and not r.unmount_session_id:
        return None
    out: dict[str, Any] = {"ok": bool(r.unmount_ok), "session_id": r.unmount_session_id}
    if r.unmount_warning:
        out["warning"] = r.unmount_warning
    return out


def stored_file(r: RecoveryRequest) -> Path | None:
    if r.status != RecoveryRequest.Status.SUCCEEDED or not r.stored_path or r.purged_at is not None:
        return None
    path = Path(r.stored_path)
    return path if path.is_file() else None


def purged_message(r: RecoveryRequest) -> str:
    return (
        f"the recovered bytes were deleted on {r.purged_at:%Y-%m-%d %H:%M} UTC after the retention period "
        "(REWIND_RECOVERED_RETENTION_DAYS); sha256 and size still say what they were"
    )


def result_dict(r: RecoveryRequest, *, inline: bool = True) -> dict[str, Any] | None:
    """``{ok, bytes|url, sha256, size, unmount}`` once the run ended; small files inline.

    Inline content is text when it decodes as UTF-8, else base64 (``encoding`` says which).
    Once the retention period deleted the bytes, ``purged_at`` is set and ``error`` says so.
    """
    if r.status not in (RecoveryRequest.Status.SUCCEEDED, RecoveryRequest.Status.FAILED):
        return None
    out: dict[str, Any] = {"ok": bool(r.ok), "sha256": r.sha256 or None, "size": r.size, "unmount": unmount_dict(r)}
    if r.status == RecoveryRequest.Status.FAILED:
        out["error"] = r.error
        return out
    if r.purged_at is not None:
        out["purged_at"] = r.purged_at.isoformat()
        out["error"] = purged_message(r)
        return out
    path = stored_file(r)
    if path is None:
        out["error"] = "the recovered file is no longer kept on this server"
        return out
    if inline and (r.size or 0) <= settings.REWIND_INLINE_MAX_BYTES:
        data = path.read_bytes()
        try:
            out["content"], out["encoding"] = data.decode("utf-8"), "utf-8"
        except UnicodeDecodeError:
            out["content"], out["encoding"] = base64.b64encode(data).decode("ascii"), "base64"
    else:
        out["url"] = download_url(r)
    return out


def waiting_message(r: RecoveryRequest) -> str:
    """What a person or an agent reads about a request waiting for its recovery site."""
    since = r.site_unavailable_since
    text = f"waiting for site {r.recovery_site_name or r.recovery_site_identifier}, unavailable " + (
        f"since {since:%Y-%m-%d %H:%M:%S} UTC" if since else "lately"
    )
    if r.site_unavailable_reason:
        text += f" ({r.site_unavailable_reason})"
    if r.resume_queued_at is not None:
        return text + "; it answers again and the run is queued"
    return text + (
        f"; the run starts again when it answers, until the request expires at {r.expires_at:%Y-%m-%d %H:%M:%S} UTC"
    )


def waiting_dict(r: RecoveryRequest) -> dict[str, Any] | None:
    """``{site, unavailable_since, reason, message}`` while the request waits for its recovery site, else None."""
    if r.status != RecoveryRequest.Status.WAITING:
        return None
    return {
        "site": r.recovery_site_name or r.recovery_site_identifier,
        "unavailable_since": r.site_unavailable_since.isoformat() if r.site_unavailable_since else None,
        "reason": r.site_unavailable_reason,
        "message": waiting_message(r),
    }


def recovery_dict(r: RecoveryRequest, *, inline: bool = False) -> dict[str, Any]:
    return {
        "id": r.pk,
        "status": r.status,
        "agent": r.agent_name,
        "vm": r.vm_name,
        "vm_identifier": r.vm_identifier,
        "path": r.path,
        "normalized_path": r.normalized_path,
        "reason": r.reason,
        "checkpoint": checkpoint_dict(r),
        "approvals": [{"approver": a.approver_name, "at": a.created_at.isoformat()} for a in r.approvals.all()],
        "approvals_required": r.approvals_required,
        "expires_at": r.expires_at.isoformat(),
        "decided_by": r.decided_by,
        "created_at": r.created_at.isoformat(),
        "started_at": r.started_at.isoformat() if r.started_at else None,
        "finished_at": r.finished_at.isoformat() if r.finished_at else None,
        "error": r.error,
        "waiting_for_site": waiting_dict(r),
        "request_id": r.request_id,
        "approval_url": approval_url(r),
        "result": result_dict(r, inline=inline),
    }


def recoveries_awaiting_approval() -> int:
    """Pending requests: what waits for a person (``/metrics``)."""
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
