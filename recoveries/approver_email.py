"""Telling approvers by email that a recovery request waits for them: the built-in channel "approver e-mail" of
``rewind.notifications`` (docs/recovery.md, "Approvers are told").

Sent by a Celery task queued when the request commits, so a slow or broken mail server never delays or fails the
request, which is in the admin queue either way. Recipients are the people who could act on it; the owner of the
requesting agent, and the person who asked, are left out, since they may not approve it. The mail never carries
a secret.
"""

from __future__ import annotations

import logging
import re
from datetime import UTC, datetime

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission, User
from django.core.mail import EmailMessage
from django.db import transaction
from django.db.models import Q

from recoveries.models import RecoveryRequest
from recoveries.presenters import approval_url, folder_summary
from rewind.audit import SYSTEM, audit_record
from rewind.audit.actions import RecoveryAction
from rewind.notifications.channels import BuiltinChannel, QueuedDelivery
from rewind.notifications.models import NotificationDelivery, NotificationKind
from rewind.notifications.services import (
    notification_delivery_claim,
    notification_delivery_close,
    notification_delivery_get,
    notification_delivery_record,
    notification_delivery_release,
)
from rewind.workers.broker import queue_task

logger = logging.getLogger(__name__)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")
SUBJECT_MAX = 150
NOTIFY_TASK = "recoveries.notify_approvers"


def approver_addresses(recovery: RecoveryRequest) -> list[str]:
    """Who is told about ``recovery``: sorted, each address once (case-insensitively)."""
    owner = _asker(recovery)
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


def _asker(recovery: RecoveryRequest) -> User | None:
    """The person who stands behind the request and so may not approve it: the agent's owner, or who asked."""
    if recovery.agent is not None:
        return recovery.agent.owner
    return recovery.requested_by


def when(value: datetime | None) -> str:
    return f"{value.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC" if value else "unknown"


def _one_line(text: str, limit: int) -> str:
    flat = _CONTROL.sub(" ", text).strip()
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def approval_summary(recovery: RecoveryRequest) -> tuple[str, list[str]]:
    """Subject and lines of "awaits approval": what an approver needs to decide, and where; the same words go to
    every channel."""
    r = recovery
    subject = _one_line(
        f"[zerto-rewind] Recovery #{r.pk} waits for approval: {r.vm_name} {r.normalized_path}"
        + (" (a folder)" if r.recursive else ""),
        SUBJECT_MAX,
    )
    reason = "\n".join("    " + line for line in (r.reason or "").splitlines()) or "    (none)"
    approvals = "two different people" if r.approvals_required > 1 else "one person"
    what = "a folder" if r.recursive else "a file"
    lines = [
        f"{r.requester[:1].upper()}{r.requester[1:]} asks for {what} back from a checkpoint. It runs only after {approvals} approve.",
        "",
        f"VM:          {r.vm_name} ({r.vm_identifier})",
        f"Path:        {r.path}",
        *([f"Folder:      {folder_summary(r)}"] if r.recursive else []),
        f"Asked by:    {r.requester}",
        f"VPG:         {r.vpg_name}, mounted at recovery site {r.recovery_site_name or r.recovery_site_identifier}",
        f"Checkpoint:  {r.checkpoint_tag or r.checkpoint_identifier}",
        f"             taken {when(r.checkpoint_timestamp)} (id {r.checkpoint_identifier})",
        f"Expires:     {when(r.expires_at)}",
        "Reason:",
        reason,
        "",
        f"Review, then approve or deny: {approval_url(r)}",
    ]
    if r.restore:
        lines[1:1] = [
            f"Restore in place: the {_restored_what(r)} will be written back into the guest, once a person has "
            "seen the diff against what is there now and clicked Write back on the review page.",
        ]
    return subject, lines


def _restored_what(r: RecoveryRequest) -> str:
    return "folder's changed and new files" if r.recursive else "file"


def approval_message(recovery: RecoveryRequest, recipients: list[str]) -> EmailMessage:
    """The mail itself: plain text, one message to every recipient (all are staff of this service)."""
    r = recovery
    subject, lines = approval_summary(r)
    body = "\n".join(
        [
            *lines,
            "",
            "You get this mail because you may approve file recoveries in zerto-rewind. "
            + ("The person who asked" if r.requested_by_name else "The owner of the agent"),
            f"is not asked: they may not approve their own request. Request id {r.request_id}.",
        ]
    )
    return EmailMessage(
        subject=subject,
        body=body,
        from_email=settings.REWIND_MAIL_FROM,
        to=recipients,
        headers={"Auto-Submitted": "auto-generated", "X-Rewind-Recovery": str(r.pk)},
    )


def awaits_approval_key(recovery_id: int) -> str:
    """The event "recovery #id awaits approval", for every channel (the approver e-mail included)."""
    return f"recovery:{recovery_id}:awaits-approval"


def _queue_mail(queued: QueuedDelivery) -> None:
    queue_task(
        NOTIFY_TASK,
        int(queued.target_id),
        queued.request_id,
        what=f"the approver e-mail of recovery #{queued.target_id}",
    )


APPROVER_EMAIL = BuiltinChannel(
    key="approver-email",
    label="Approver e-mail (staff who may approve, and REWIND_APPROVER_EMAILS)",
    kinds=frozenset({NotificationKind.RECOVERY_AWAITS_APPROVAL}),
    queue=_queue_mail,
)


def _mail_delivery(recovery_id: int, recovery: RecoveryRequest | None, request_id: str) -> NotificationDelivery | None:
    """This request's approver e-mail delivery: recorded with the request; recorded now when a task
    queued without one (before deliveries were recorded) runs."""
    found = notification_delivery_get(dedupe_key=awaits_approval_key(recovery_id), channel=APPROVER_EMAIL.key)
    if found is not None or recovery is None:
        return found
    subject, lines = approval_summary(recovery)
    return notification_delivery_record(
        kind=NotificationKind.RECOVERY_AWAITS_APPROVAL,
        dedupe_key=awaits_approval_key(recovery_id),
        channel=APPROVER_EMAIL.key,
        title=subject,
        body="\n".join(lines),
        target=recovery,
        request_id=request_id,
    )


def _skip(delivery: NotificationDelivery | None, why: str) -> None:
    if delivery is not None:
        notification_delivery_close(delivery=delivery, status=NotificationDelivery.Status.SKIPPED, error=why)


def recovery_notify_approvers(*, recovery_id: int, request_id: str | None = None, last_try: bool = True) -> str:
    """Mail the approvers of a pending request; what happened, in a word.

    The delivery is claimed before the mail goes, so a redelivered task mails once. An ``OSError`` from the
    backend (``smtplib.SMTPException`` is one) is raised for the task to retry, or on ``last_try`` recorded and
    audited. Nothing is sent for a request gone, decided or expired, or with nobody to tell: the delivery is
    then skipped.
    """
    recovery = RecoveryRequest.objects.select_related("agent__owner", "requested_by").filter(pk=recovery_id).first()
    delivery = _mail_delivery(recovery_id, recovery, request_id or "")
    if recovery is None or delivery is None:
        _skip(delivery, "the request is gone")
        return "gone"
    if recovery.status != RecoveryRequest.Status.PENDING or recovery.is_expired_now:
        logger.info("recovery #%s is %s; approvers not notified", recovery.pk, recovery.status)
        _skip(delivery, f"the request is {recovery.status}")
        return "not pending"
    if not notification_delivery_claim(delivery=delivery):
        delivery.refresh_from_db()
        return f"already {delivery.status}"
    recipients = approver_addresses(recovery)
    if not recipients:
        logger.warning(
            "recovery #%s waits for approval but no approver has an email address; "
            "give them one or set REWIND_APPROVER_EMAILS",
            recovery.pk,
        )
        _skip(delivery, "no approver has an email address")
        return "no recipients"
    try:
        sent = approval_message(recovery, recipients).send()
    except OSError as exc:
        if last_try:
            recovery_notify_failed(recovery=recovery, delivery=delivery, error=exc, request_id=request_id)
            return "failed"
        notification_delivery_release(delivery=delivery, error=_error_text(exc))
        raise
    if not sent:
        _skip(delivery, "no mail server is configured (EMAIL_HOST)")
        return "not sent"  # the backend said why
    with transaction.atomic():
        notification_delivery_close(delivery=delivery, status=NotificationDelivery.Status.SENT)
        audit_record(
            actor=SYSTEM,
            action=RecoveryAction.NOTIFIED,
            target=recovery,
            data={"recipients": recipients, "count": len(recipients), "delivery": delivery.pk},
            request_id=request_id,
        )
    return "sent"


def _error_text(error: BaseException) -> str:
    return _one_line(f"{type(error).__name__}: {error}", 500)


def recovery_notify_failed(
    *,
    recovery: RecoveryRequest,
    delivery: NotificationDelivery,
    error: BaseException,
    request_id: str | None = None,
) -> None:
    """Record that no mail went out after every attempt; the request itself is unaffected."""
    message = _error_text(error)
    logger.warning(
        "could not notify the approvers of recovery #%s after %d attempts: %s", recovery.pk, delivery.attempts, message
    )
    with transaction.atomic():
        notification_delivery_close(delivery=delivery, status=NotificationDelivery.Status.FAILED, error=message)
        audit_record(
            actor=SYSTEM,
            action=RecoveryAction.NOTIFY_FAILED,
            target=recovery,
            data={"error": delivery.last_error, "attempts": delivery.attempts, "delivery": delivery.pk},
            request_id=request_id,
        )
