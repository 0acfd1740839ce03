"""What recoveries tell the notification channels: a request awaits approval, it expires soon, a mount of ours
could not be unmounted.

Each event has a key naming it, so every channel hears it once however often a sweep or a retry gets here. The
texts say what a person needs to act and where, never a secret; wording one never fails the flow it is part of.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from recoveries.approver_email import approval_summary, awaits_approval_key, when
from recoveries.models import FlrSession, RecoveryRequest
from recoveries.presenters import approval_url, live_sessions_url
from recoveries.selectors import recovery_site
from rewind.notifications.models import NotificationDelivery, NotificationKind
from rewind.notifications.services import notification_send, notifying


def _site_names(recovery: RecoveryRequest) -> list[str]:
    site = recovery_site(recovery)
    return [site.name] if site is not None else []


def recovery_announce(*, recovery: RecoveryRequest, request_id: str | None = None) -> None:
    """Tell every channel (the approver e-mail among them) that the request awaits approval;
    called in the transaction that records it."""
    with notifying(f"recovery #{recovery.pk} awaits approval"):
        subject, lines = approval_summary(recovery)
        notification_send(
            kind=NotificationKind.RECOVERY_AWAITS_APPROVAL,
            dedupe_key=awaits_approval_key(recovery.pk),
            title=subject,
            body="\n".join(lines),
            sites=_site_names(recovery),
            target=recovery,
            request_id=request_id,
        )


def recovery_requests_warn_expiring(*, now: datetime | None = None) -> int:
    """The beat's sweep: each pending request expiring within REWIND_NOTIFY_EXPIRY_WARN_MIN is announced once more;
    how many deliveries this call recorded. Safe to overlap."""
    minutes = settings.REWIND_NOTIFY_EXPIRY_WARN_MIN
    if minutes <= 0:
        return 0
    now = now or timezone.now()
    due = RecoveryRequest.objects.filter(
        status=RecoveryRequest.Status.PENDING, expires_at__gt=now, expires_at__lte=now + timedelta(minutes=minutes)
    )
    recorded = 0
    for recovery in due.order_by("expires_at")[:200]:
        with notifying(f"recovery #{recovery.pk} expires soon"):
            recorded += len(_warn_expiring(recovery, now))
    return recorded


def _warn_expiring(r: RecoveryRequest, now: datetime) -> list[NotificationDelivery]:
    left = max(1, round((r.expires_at - now).total_seconds() / 60))
    body = "\n".join(
        [
            f"Recovery #{r.pk} still waits for approval and expires in about {left} min, at {when(r.expires_at)}.",
            f"VM {r.vm_name}, path {r.path}, asked by {r.requester}.",
            f"Once it expires, {r.requester} has to ask again.",
            "",
            f"Review, then approve or deny: {approval_url(r)}",
        ]
    )
    return notification_send(
        kind=NotificationKind.RECOVERY_EXPIRES_SOON,
        dedupe_key=f"recovery:{r.pk}:expires-soon",
        title=f"[zerto-rewind] Recovery #{r.pk} expires in {left} min: {r.vm_name} {r.normalized_path}",
        body=body,
        sites=_site_names(r),
        target=r,
        request_id=r.request_id or None,
    )


def flr_session_announce_unmount_failed(*, row: FlrSession, error: str, request_id: str | None = None) -> None:
    """Tell the channels that a mount of ours could not be unmounted, once per session however often the reaper
    tries again."""
    with notifying(f"FLR session #{row.pk} could not be unmounted"):
        _announce_unmount_failed(row, error, request_id)


def _announce_unmount_failed(row: FlrSession, error: str, request_id: str | None) -> None:
    site = row.site.name if row.site_id else ""
    recovery = f", recovery #{row.recovery_id}" if row.recovery_id else ""
    body = "\n".join(
        [
            f"zerto-rewind opened FLR session {row.session_id or 'unknown'} on site {site} and could not unmount it:",
            f"    {error}",
            f"VM {row.vm_identifier}, VPG {row.vpg_identifier}, checkpoint {row.checkpoint_identifier}{recovery}.",
            "While it stays mounted it blocks the next clone, failover test, live failover or Extended Journal Copy",
            f"of that VPG. The reaper tries again every {settings.REWIND_REAPER_INTERVAL_S} s; a person may end it at:",
            live_sessions_url(),
        ]
    )
    notification_send(
        kind=NotificationKind.UNMOUNT_FAILED,
        dedupe_key=f"flr-session:{row.pk}:unmount-failed",
        title=f"[zerto-rewind] FLR session on {site} could not be unmounted",
        body=body,
        sites=[site],
        target=row,
        request_id=request_id,
    )
