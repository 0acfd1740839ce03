"""Reads: what a recovery looks like to an approver, an agent and the REST API."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db.models import QuerySet
from django.urls import reverse

from recoveries.models import FlrSession, RecoveryRequest
from rewind.models import Site
from rewind.requestid import current_request_id
from rewind.sites import site_connection
from rewind.zvm import ZvmError, shared_client


def recovery_list(*, status: str | None = None) -> QuerySet[RecoveryRequest]:
    qs = RecoveryRequest.objects.select_related("agent").prefetch_related("approvals")
    return qs.filter(status=status) if status else qs


def approval_url(recovery: RecoveryRequest) -> str:
    """The admin page where a person reviews and approves or denies the request."""
    return settings.REWIND_PUBLIC_URL + reverse("admin:recoveries_recoveryrequest_review", args=[recovery.pk])


def download_url(recovery: RecoveryRequest) -> str:
    """Authenticated download: the requesting agent's bearer token, or a staff session."""
    return settings.REWIND_PUBLIC_URL + reverse("recoveries-api:download", args=[recovery.pk])


def checkpoint_dict(r: RecoveryRequest) -> dict[str, Any]:
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
    return (f"the recovered bytes were deleted on {r.purged_at:%Y-%m-%d %H:%M} UTC after the retention period "
            "(REWIND_RECOVERED_RETENTION_DAYS); sha256 and size still say what they were")


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
        "request_id": r.request_id,
        "approval_url": approval_url(r),
        "result": result_dict(r, inline=inline),
    }


@dataclass(frozen=True)
class LiveSession:
    site: Site
    session_id: str
    status: str | None
    vm_identifier: str | None
    vpg_identifier: str | None
    checkpoint_identifier: str | None
    mount_time: str | None
    ours: FlrSession | None


@dataclass(frozen=True)
class SessionListing:
    sessions: list[LiveSession]
    errors: dict[str, str]


def flr_sessions_everywhere(*, live_only: bool = True) -> SessionListing:
    """Every FLR session every enabled site's ZVM lists, with ours marked (one call per site)."""
    sessions: list[LiveSession] = []
    errors: dict[str, str] = {}
    for site in Site.objects.filter(enabled=True):
        try:
            listed = shared_client(site_connection(site), request_id=current_request_id()).list_flr_sessions()
        except ZvmError as exc:
            errors[site.name] = str(exc)
            continue
        ids = [s.identifier for s in listed if s.identifier]
        ours = {row.session_id.lower(): row for row in FlrSession.objects.filter(site=site, session_id__in=ids)}
        for s in listed:
            if live_only and s.is_terminal:
                continue
            sessions.append(LiveSession(
                site=site, session_id=s.identifier or "", status=s.status, vm_identifier=s.vm_identifier,
                vpg_identifier=s.vpg_identifier, checkpoint_identifier=s.checkpoint_identifier,
                mount_time=s.mount_time.isoformat() if s.mount_time else None,
                ours=ours.get((s.identifier or "").lower()),
            ))
    return SessionListing(sessions, errors)
