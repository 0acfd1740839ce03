"""Celery tasks of notifications: thin wrappers. The names are in queued messages and the beat schedule: keep them."""

from __future__ import annotations

from celery import Task, shared_task

from rewind.lib.requestid import bound_request_id
from rewind.notifications.audit_chain import audit_chain_announce_broken
from rewind.notifications.services import DELIVER_TASK, DeliveryRetry, notification_deliver, notifications_settle

# Webhooks and chat services are down for seconds to minutes: try again after 15 s, 30 s,
# 1 min and 2 min, then record the failure (five tries in about four minutes).
DELIVER_MAX_RETRIES = 4


@shared_task(
    name=DELIVER_TASK,
    bind=True,
    autoretry_for=(DeliveryRetry,),
    retry_backoff=15,
    retry_backoff_max=300,
    retry_jitter=False,
    max_retries=DELIVER_MAX_RETRIES,
)
def notifications_deliver(self: Task, delivery_id: int, request_id: str | None = None) -> str:
    """Send one recorded delivery (``notification_deliver``). A repeat sends nothing twice."""
    with bound_request_id(request_id):
        return notification_deliver(delivery_id=delivery_id, last_try=self.request.retries >= DELIVER_MAX_RETRIES)


@shared_task(name="rewind.notifications.settle", ignore_result=True)
def notifications_settle_task() -> dict[str, int]:
    """Close deliveries lost mid-send and queue again those whose task was lost. Safe to overlap."""
    return notifications_settle()


@shared_task(name="rewind.notifications.announce_audit_chain_broken", ignore_result=True)
def notifications_announce_audit_chain_broken() -> int | None:
    """Tell the channels of a failed check of the audit chain, once per check. Safe to overlap."""
    return audit_chain_announce_broken()
