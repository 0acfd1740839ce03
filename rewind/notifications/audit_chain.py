"""What the audit log tells the notification channels: a check of its chain failed.

The audit log sits below the notifications and names none of them; every check it records
(``manage.py audit_verify``, the anchor publisher finding a break) is an ``audit.chain.broken``
event in the chain. The beat's sweep (and ``audit_verify`` at once) tells the channels of the
newest such event, once per event: a chain that stays broken is told again at each failed
verification, never at each sweep.
"""

from __future__ import annotations

from django.conf import settings
from django.urls import reverse

from rewind.audit.actions import AuditLogAction
from rewind.audit.selectors import audit_last_verification
from rewind.notifications.models import NotificationKind
from rewind.notifications.services import notification_send, notifying


def audit_chain_announce_broken() -> int | None:
    """Tell the channels when the newest recorded check of the chain failed; returns the event's id
    (told before or now), None when the newest check passed or none was recorded. Safe to repeat."""
    last = audit_last_verification()
    if last is None or last.action != AuditLogAction.CHAIN_BROKEN:
        return None
    data = last.data if isinstance(last.data, dict) else {}
    at = data.get("broken_at")
    where = f"#{last.seq}" if last.seq is not None else f"id {last.pk}"
    body = "\n".join(
        [
            f"The audit chain is BROKEN at event #{at}: {data.get('reason', '')}",
            f"Found by {last.actor} at {last.time:%Y-%m-%d %H:%M:%S} UTC (recorded as audit event {where}); "
            f"{data.get('events', 0)} event(s) before it are intact.",
            "Events are still recorded after it. Run manage.py audit_verify --anchors to see every anchor held "
            "against the chain, and look at who could write to the database.",
            "",
            f"Audit log: {settings.REWIND_PUBLIC_URL}{reverse('admin:rewind_auditevent_changelist')}",
        ]
    )
    with notifying(f"the audit chain is broken at event #{at}"):
        notification_send(
            kind=NotificationKind.AUDIT_CHAIN_BROKEN,
            dedupe_key=f"audit:chain-broken:{last.pk}",
            title=f"[zerto-rewind] The audit chain is BROKEN at event #{at}",
            body=body,
            target=last,
        )
    return last.pk
