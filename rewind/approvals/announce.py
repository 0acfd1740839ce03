"""What a held call tells the notification channels: it waits for a person, with the page's link."""

from __future__ import annotations

from django.conf import settings
from django.urls import reverse

from rewind.approvals.models import HeldCall
from rewind.notifications.models import NotificationKind
from rewind.notifications.services import notification_send, notifying


def review_url(held: HeldCall) -> str:
    """The admin page where a person reads the call as it will be sent, then approves or denies it."""
    return settings.REWIND_PUBLIC_URL + reverse("admin:rewind_heldcall_review", args=[held.pk])


def held_call_announce(*, held: HeldCall) -> None:
    """Tell every channel once that ``held`` waits for a person; called in the transaction that made it pending."""
    with notifying(f"held call #{held.pk} waits for a person"):
        where = f" on VM {held.vm}" if held.vm else ""
        checkpoints = (
            ", ".join(str(c.get("checkpoint_identifier")) for c in held.checkpoints) or "none (no protected VM)"
        )
        lines = [
            f"Agent {held.agent_name} wants to call {held.tool}{where}; it waits for a person's approval.",
            f"Why a person: {held.reason}",
            f"Checkpoints taken before: {checkpoints}",
            f"Expires at {held.expires_at:%Y-%m-%d %H:%M} UTC; {held.approvals_required} approval(s) needed.",
            "",
            f"Read the exact call, then approve or deny it: {review_url(held)}",
        ]
        notification_send(
            kind=NotificationKind.CALL_AWAITS_APPROVAL,
            dedupe_key=f"held:{held.pk}:awaits",
            title=f"[zerto-rewind] {held.agent_name} waits for approval: {held.tool}{where}",
            body="\n".join(lines),
            target=held,
            request_id=held.request_id or None,
        )
