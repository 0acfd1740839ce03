"""FLR sessions: recording the ones this service opened, finding them again, listing every site's, ending them.

An unmount is audited before its DELETE is sent (fail-closed) and after; status changes are
compare-and-swap, so of the runner, the reaper, an agent and a person ending one, one sends the DELETE.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from recoveries.announce import flr_session_announce_unmount_failed
from recoveries.flr_listing import flr_listing_record
from recoveries.models import FlrSession, RecoveryRequest
from recoveries.presenters import live_sessions_url
from recoveries.selectors import calling_agent
from rewind.audit import Actor, audit_record
from rewind.audit.actions import RecoveryAction
from rewind.lib.errors import ApplicationError, NotFoundError, PermissionDeniedError
from rewind.sites import site_client
from rewind.sites.models import Site
from rewind.zvm import FlrSession as ZvmFlrSession
from rewind.zvm import ZvmClient, ZvmError, ZvmNotFoundError

logger = logging.getLogger(__name__)
S = FlrSession.Status
# Statuses from which an unmount may be started.
UNMOUNTABLE = (S.MOUNTING, S.UNKNOWN, S.MOUNTED, S.UNMOUNT_FAILED)
# An accepted unmount whose session is still mounted this long after may be sent again.
UNMOUNT_RETRY_AFTER = timedelta(seconds=60)


@dataclass(frozen=True)
class UnmountReport:
    ok: bool
    session_id: str
    warning: str = ""

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"ok": self.ok, "session_id": self.session_id}
        if self.warning:
            out["warning"] = self.warning
        return out


def session_transition(
    *,
    row: FlrSession,
    to: str,
    actor: Actor,
    action: str | None = None,
    data: dict[str, object] | None = None,
    from_statuses: tuple[str, ...] | None = None,
    request_id: str | None = None,
    **fields: object,
) -> bool:
    """CAS ``row`` from its known status (or ``from_statuses``) to ``to``, audited when ``action``; False, changing
    nothing, when another actor moved it first."""
    expected = from_statuses or (row.status,)
    now = timezone.now()
    if to == S.ENDED:
        fields.setdefault("ended_at", now)
    if to == S.MOUNTED:
        fields.setdefault("mounted_at", now)
    with transaction.atomic():
        won = FlrSession.objects.filter(pk=row.pk, status__in=expected).update(status=to, **fields)
        if not won:
            return False
        row.status = to
        for name, value in fields.items():
            setattr(row, name, value)
        if action:
            audit_record(
                actor=actor, action=action, target=row, data={**row.audit_data(), **(data or {})}, request_id=request_id
            )
    return True


def _claim_unmount(row: FlrSession, actor: Actor, action: str, reason: str, request_id: str | None) -> bool:
    """CAS the row to unmounting and audit it, so only one caller sends the DELETE; a row already unmounting is
    claimed again only once its last DELETE is old enough (accepted, yet the ZVM still holds the mount)."""
    now = timezone.now()
    claimable = Q(status__in=UNMOUNTABLE) | Q(status=S.UNMOUNTING, unmount_requested_at__lt=now - UNMOUNT_RETRY_AFTER)
    with transaction.atomic():
        if not FlrSession.objects.filter(claimable, pk=row.pk).update(status=S.UNMOUNTING, unmount_requested_at=now):
            return False
        row.status, row.unmount_requested_at = S.UNMOUNTING, now
        audit_record(
            actor=actor, action=action, target=row, data={**row.audit_data(), "reason": reason}, request_id=request_id
        )
    return True


def session_unmount(
    *,
    client: ZvmClient,
    row: FlrSession,
    actor: Actor,
    reason: str,
    wait_gone_s: float = 0.0,
    audit_action: str = RecoveryAction.SESSION_UNMOUNT_REQUESTED,
    request_id: str | None = None,
) -> UnmountReport | None:
    """Unmount one of our sessions; None when another actor already took it over. With ``wait_gone_s`` the session
    list is polled until the ZVM no longer lists it; one still listed stays ``unmounting`` for the reaper."""
    if not row.session_id:
        raise ApplicationError("this mount's session id is not known yet; the reaper looks for it")
    if not _claim_unmount(row, actor, audit_action, reason, request_id):
        return None
    try:
        client.flr_unmount(row.session_id)
    except ZvmNotFoundError:
        _ended(row, actor, "already gone when unmounted", request_id)
        return UnmountReport(True, row.session_id)
    except ZvmError as exc:
        if session_transition(
            row=row,
            to=S.UNMOUNT_FAILED,
            actor=actor,
            action=RecoveryAction.SESSION_UNMOUNT_FAILED,
            data={"error": str(exc)},
            last_error=str(exc)[:2000],
            request_id=request_id,
        ):
            flr_session_announce_unmount_failed(row=row, error=str(exc), request_id=request_id)
        return UnmountReport(False, row.session_id, f"the unmount failed: {exc}; the reaper will try again")
    if wait_gone_s <= 0:
        return UnmountReport(True, row.session_id)
    return _confirm_gone(client, row, actor, reason, wait_gone_s, request_id)


def _confirm_gone(
    client: ZvmClient, row: FlrSession, actor: Actor, reason: str, wait_s: float, request_id: str | None
) -> UnmountReport:
    deadline = time.monotonic() + wait_s
    delay = 0.1
    last = ""
    while True:
        try:
            current = session_lookup(client, row.session_id, row.vm_identifier)
            last = current.status or "listed"
        except ZvmNotFoundError:
            _ended(row, actor, reason, request_id)
            return UnmountReport(True, row.session_id)
        except ZvmError as exc:
            last = str(exc)
        else:
            if current.is_unmounted:  # some ZVMs list ended sessions for a while
                _ended(row, actor, f"{reason} (the ZVM lists it as {current.status})", request_id)
                return UnmountReport(True, row.session_id)
        if time.monotonic() >= deadline:
            return UnmountReport(
                False,
                row.session_id,
                f"the unmount was accepted but the ZVM still lists the session ({last}); the reaper will check again",
            )
        time.sleep(delay)
        delay = min(1.0, delay * 2)


def _ended(row: FlrSession, actor: Actor, reason: str, request_id: str | None) -> None:
    session_transition(
        row=row,
        to=S.ENDED,
        actor=actor,
        action=RecoveryAction.SESSION_UNMOUNTED,
        from_statuses=FlrSession.LIVE,
        data={"reason": reason},
        end_reason=reason[:500],
        request_id=request_id,
    )


def session_mark_vanished(*, row: FlrSession, actor: Actor, reason: str = "vanished from the ZVM") -> bool:
    """The ZVM no longer lists the session (unmounted, restarted, expired): record it ended."""
    return session_transition(
        row=row,
        to=S.ENDED,
        actor=actor,
        action=RecoveryAction.SESSION_VANISHED,
        from_statuses=FlrSession.LIVE,
        data={"reason": reason},
        end_reason=reason[:500],
    )


def session_end_unseen(*, row: FlrSession, actor: Actor, settled_s: float) -> bool:
    """End a mount whose id was never learned and for which the ZVM lists no session (the caller read the site's
    list after the settle time). The CAS requires the id still unknown, so a sweep that just found it keeps it."""
    reason = "no session appeared for this mount"
    with transaction.atomic():
        won = FlrSession.objects.filter(pk=row.pk, status__in=(S.MOUNTING, S.UNKNOWN), session_id="").update(
            status=S.ENDED, ended_at=timezone.now(), end_reason=reason
        )
        if not won:
            return False
        row.status, row.end_reason = S.ENDED, reason
        audit_record(
            actor=actor,
            action=RecoveryAction.SESSION_VANISHED,
            target=row,
            data={**row.audit_data(), "reason": reason, "settled_s": settled_s, "last_error": row.last_error},
        )
    return True


def ours(site: Site, session_id: str) -> FlrSession | None:
    return FlrSession.objects.filter(site=site, session_id__iexact=session_id).select_related("site").first()


def session_end_by_hand(*, site: Site, session_id: str, actor: Actor) -> UnmountReport:
    """A person ends any live session (ours or another operator's) after a confirmation page, audited as
    ``recoveries.session.ended_by_hand`` before the DELETE is sent."""
    client = site_client(site)
    row = ours(site, session_id)
    if row is not None and row.status in FlrSession.LIVE:
        report = session_unmount(
            client=client,
            row=row,
            actor=actor,
            reason="ended by hand",
            audit_action=RecoveryAction.SESSION_ENDED_BY_HAND,
        )
        return report or UnmountReport(True, session_id, "another task was already ending it")
    with transaction.atomic():
        audit_record(
            actor=actor,
            action=RecoveryAction.SESSION_ENDED_BY_HAND,
            target=("flr_session", session_id),
            data={"site": site.name, "session_id": session_id, "opened_by_this_service": row is not None},
        )
    try:
        client.flr_unmount(session_id)
    except ZvmNotFoundError:
        raise NotFoundError(f"{site.name} no longer lists FLR session {session_id}") from None
    except ZvmError as exc:
        with transaction.atomic():
            audit_record(
                actor=actor,
                action=RecoveryAction.SESSION_UNMOUNT_FAILED,
                target=("flr_session", session_id),
                data={"site": site.name, "session_id": session_id, "error": str(exc)},
            )
        return UnmountReport(False, session_id, f"the unmount failed: {exc}")
    return UnmountReport(True, session_id)


def session_lookup(client: ZvmClient, session_id: str, vm_identifier: str) -> ZvmFlrSession:
    """The ZVM's view of one session, ``ZvmNotFoundError`` when not listed. Reads the VM's list rather than ``GET
    /v1/flrs/{id}``: the list has one documented shape, the single answer two."""
    for session in client.list_flr_sessions(vm_id=vm_identifier):
        if (session.identifier or "").lower() == session_id.lower():
            return session
    raise ZvmNotFoundError(client.conn.site_name, f"FLR session {session_id} is not listed", status=404)


@dataclass(frozen=True)
class AgentEndReport:
    ok: bool
    session_id: str
    site: str
    warning: str = ""


def flr_session_end_for_agent(*, agent_id: int, session_id: str) -> AgentEndReport:
    """An agent ends one live session this service opened, once its recovery no longer runs:
    ``PermissionDeniedError`` for any other session (only a person may end those), ``ApplicationError`` while
    the recovery that mounted it still runs."""
    session_id = session_id.strip()
    row = (
        FlrSession.objects.select_related("site", "recovery")
        .filter(session_id__iexact=session_id, status__in=FlrSession.LIVE)
        .first()
    )
    if row is None:
        raise PermissionDeniedError(
            f"FLR session {session_id} was not opened by this service (or is already ended); only a person may end "
            f"another operator's session, in the admin: {live_sessions_url()}"
        )
    if row.recovery is not None and row.recovery.status == RecoveryRequest.Status.RUNNING:
        raise ApplicationError(
            f"session {session_id} belongs to recovery #{row.recovery_id}, which is still running; "
            "it is unmounted when the run ends"
        )
    agent = calling_agent(agent_id=agent_id)
    report = session_unmount(
        client=site_client(row.site),
        row=row,
        actor=Actor.agent(agent.name),
        reason=f"ended by agent {agent.name}",
        wait_gone_s=10.0,
    )
    if report is None:
        return AgentEndReport(True, session_id, row.site.name, "it was already being ended")
    return AgentEndReport(report.ok, session_id, row.site.name, report.warning)


@dataclass(frozen=True)
class LiveSession:
    site: Site
    session_id: str
    status: str | None
    vm_identifier: str | None
    vpg_identifier: str | None
    checkpoint_identifier: str | None
    mount_time: datetime | None
    ours: FlrSession | None


@dataclass(frozen=True)
class SessionListing:
    sessions: list[LiveSession]
    errors: dict[str, str]


def flr_sessions_everywhere(*, live_only: bool = True, site_pk: int | None = None) -> SessionListing:
    """Every FLR session every enabled site's ZVM lists (or only ``site_pk``'s), with ours marked
    (one call per site). Each site's listing is recorded (``FlrSiteListing``).
    """
    sessions: list[LiveSession] = []
    errors: dict[str, str] = {}
    sites = Site.objects.filter(enabled=True)
    for site in sites if site_pk is None else sites.filter(pk=site_pk):
        try:
            listed = site_client(site).list_flr_sessions()
        except ZvmError as exc:
            errors[site.name] = str(exc)
            continue
        flr_listing_record(site=site, sessions=listed)
        ids = [s.identifier for s in listed if s.identifier]
        recorded = {row.session_id.lower(): row for row in FlrSession.objects.filter(site=site, session_id__in=ids)}
        for s in listed:
            if live_only and s.is_terminal:
                continue
            sessions.append(
                LiveSession(
                    site=site,
                    session_id=s.identifier or "",
                    status=s.status,
                    vm_identifier=s.vm_identifier,
                    vpg_identifier=s.vpg_identifier,
                    checkpoint_identifier=s.checkpoint_identifier,
                    mount_time=s.mount_time,
                    ours=recorded.get((s.identifier or "").lower()),
                )
            )
    return SessionListing(sessions, errors)


def fitting_sessions(row: FlrSession, sessions: object) -> list[str]:
    """Live sessions a lost mount answer may have named: same VM, VPG and checkpoint, new, not ours."""
    snapshot = {s.lower() for s in row.snapshot_ids}
    known = {
        s.lower()
        for s in FlrSession.objects.filter(site_id=row.site_id)
        .exclude(session_id="")
        .values_list("session_id", flat=True)
    }
    fits = [
        s.identifier
        for s in sessions  # type: ignore[attr-defined]
        if s.identifier
        and s.identifier.lower() not in snapshot
        and s.identifier.lower() not in known
        and (s.vm_identifier or "").lower() == row.vm_identifier.lower()
        and (s.vpg_identifier or "").lower() == row.vpg_identifier.lower()
        and (s.checkpoint_identifier or "") == row.checkpoint_identifier
    ]
    return fits


def find_unknown_session(client: ZvmClient, row: FlrSession) -> tuple[str | None, int]:
    """For the runner: list the VM's sessions and adopt the one a lost mount answer named; (its id, or None when
    none or several fit, since which is ours cannot be told; how many fit). Raises ``ZvmError`` when the
    sessions cannot be listed."""
    fits = fitting_sessions(row, client.list_flr_sessions(vm_id=row.vm_identifier))
    if len(fits) != 1:
        return None, len(fits)
    found = fits[0]
    if not FlrSession.objects.filter(pk=row.pk, session_id="").update(session_id=found):
        return None, 1
    row.refresh_from_db()
    return found, 1
