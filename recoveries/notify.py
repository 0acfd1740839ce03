"""Telling approvers by email that a recovery request waits for them.

Runs in the Celery task ``recoveries.notify_approvers``, queued when the request commits, so
a slow or broken mail server never delays or fails the request itself: the request is in the
admin queue either way, and the mail is only the cue to look there.

Recipients are the people who could act on the mail: active staff users (the review page is
in the admin) with an email address who hold ``recoveries.approve_recovery`` directly,
through a group, or as superusers, plus the extra addresses of REWIND_APPROVER_EMAILS. The
owner of the requesting agent is left out: they may not approve their own agent's request.
The mail carries what an approver needs to decide, never a secret (no token, no password).
"""

from __future__ import annotations

import logging
import re
from datetime import UTC, datetime

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.mail import EmailMessage
from django.db import transaction
from django.db.models import Q

from recoveries.models import RecoveryRequest
from recoveries.selectors import approval_url
from rewind.audit import SYSTEM, audit_record
from rewind.audit.actions import RecoveryAction

logger = logging.getLogger(__name__)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")
SUBJECT_MAX = 150


def approver_addresses(recovery: RecoveryRequest) -> list[str]:
    """Who is told about ``recovery``: sorted, each address once (case-insensitively)."""
    owner = recovery.agent.owner if recovery.agent is not None else None
    users = get_user_model().objects.filter(is_active=True, is_staff=True).exclude(email="")
    holds = Q(is_superuser=True)
    perm = Permission.objects.filter(content_type__app_label="recoveries", codename="approve_recovery").first()
    if perm is not None:
        holds |= Q(user_permissions=perm) | Q(groups__permissions=perm)
    users = users.filter(holds)
    if owner is not None:
        users = users.exclude(pk=owner.pk)
    found = list(users.values_list("email", flat=True).distinct())
    # The owner's address is left out of the extra list too: the mail asks for a decision
    # they are not allowed to make.
    skip = {(owner.email or "").casefold()} - {""} if owner is not None else set()
    out: dict[str, str] = {}
    for address in [*found, *settings.REWIND_APPROVER_EMAILS]:
        key = address.strip().casefold()
        if key and key not in skip:
            out.setdefault(key, address.strip())
    return sorted(out.values(), key=str.casefold)


def _when(value: datetime | None) -> str:
    return f"{value.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC" if value else "unknown"


def _one_line(text: str, limit: int) -> str:
    flat = _CONTROL.sub(" ", text).strip()
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def approval_message(recovery: RecoveryRequest, recipients: list[str]) -> EmailMessage:
    """The mail itself: plain text, one message to every recipient (all are staff of this service)."""
    r = recovery
    subject = _one_line(
        f"[zerto-rewind] Recovery #{r.pk} waits for approval: {r.vm_name} {r.normalized_path}", SUBJECT_MAX
    )
    reason = "\n".join("    " + line for line in (r.reason or "").splitlines()) or "    (none)"
    approvals = "two different people" if r.approvals_required > 1 else "one person"
    body = "\n".join(
        [
            f"Agent {r.agent_name} asks for a file back from a checkpoint. It runs only after {approvals} approve.",
            "",
            f"VM:          {r.vm_name} ({r.vm_identifier})",
            f"Path:        {r.path}",
            f"Agent:       {r.agent_name}",
            f"VPG:         {r.vpg_name}, mounted at recovery site {r.recovery_site_name or r.recovery_site_identifier}",
            f"Checkpoint:  {r.checkpoint_tag or r.checkpoint_identifier}",
            f"             taken {_when(r.checkpoint_timestamp)} (id {r.checkpoint_identifier})",
            f"Expires:     {_when(r.expires_at)}",
            "Reason:",
            reason,
            "",
            f"Review, then approve or deny: {approval_url(r)}",
            "",
            "You get this mail because you may approve file recoveries in zerto-rewind. The owner of the",
            f"agent is not asked: they may not approve their own agent's request. Request id {r.request_id}.",
        ]
    )
    return EmailMessage(
        subject=subject,
        body=body,
        from_email=settings.REWIND_MAIL_FROM,
        to=recipients,
        headers={"Auto-Submitted": "auto-generated", "X-Rewind-Recovery": str(r.pk)},
    )


def recovery_notify_approvers(*, recovery_id: int, request_id: str | None = None) -> str:
    """Mail the approvers of a pending request; returns what happened, in a word.

    Raises what the mail backend raises (``OSError``, ``smtplib.SMTPException``): the task
    retries those. Nothing is sent for a request that is gone, decided or expired, or when
    nobody has an address. A repeat (a retry after a failed send) sends again.
    """
    recovery = RecoveryRequest.objects.select_related("agent__owner").filter(pk=recovery_id).first()
    if recovery is None:
        return "gone"
    if recovery.status != RecoveryRequest.Status.PENDING or recovery.is_expired_now:
        logger.info("recovery #%s is %s; approvers not notified", recovery.pk, recovery.status)
        return "not pending"
    recipients = approver_addresses(recovery)
    if not recipients:
        logger.warning(
            "recovery #%s waits for approval but no approver has an email address; "
            "give them one or set REWIND_APPROVER_EMAILS",
            recovery.pk,
        )
        return "no recipients"
    sent = approval_message(recovery, recipients).send()
    if not sent:
        return "not sent"  # the backend said why (no mail configured)
    with transaction.atomic():
        audit_record(
            actor=SYSTEM,
            action=RecoveryAction.NOTIFIED,
            target=recovery,
            data={"recipients": recipients, "count": len(recipients)},
            request_id=request_id,
        )
    return "sent"


def recovery_notify_failed(
    *, recovery_id: int, error: BaseException, attempts: int, request_id: str | None = None
) -> None:
    """Record that no mail went out after every attempt; the request itself is unaffected."""
    message = _one_line(f"{type(error).__name__}: {error}", 500)
    logger.warning(
        "could not notify the approvers of recovery #%s after %d attempts: %s", recovery_id, attempts, message
    )
    recovery = RecoveryRequest.objects.filter(pk=recovery_id).first()
    if recovery is None:
        return
    with transaction.atomic():
        audit_record(
            actor=SYSTEM,
            action=RecoveryAction.NOTIFY_FAILED,
            target=recovery,
            data={"error": message, "attempts": attempts},
            request_id=request_id,
        )
