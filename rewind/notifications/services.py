"""Notifications: record an event once per channel, queue its delivery after commit, send it, record how it went.

``notification_send`` is what parts call when something happens. It never raises and never
fails the caller's transaction: a notification is a cue for people, never a condition of the
flow. Each channel's delivery is a row recorded before anything is sent; the unique
``(dedupe_key, channel)`` decides who sends, so a repeated sweep, a redelivered task or two
processes at once tell an event to a channel once. Apprise channels are sent by the task
``rewind.notifications.deliver`` (retried with backoff, a bounded number of times); a built-in
channel queues its own task and records its outcome through the ``notification_delivery_*``
functions below.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, models, transaction
from django.db.models import F, Q
from django.utils import timezone

from rewind.audit import SYSTEM, Actor, audit_record
from rewind.audit.actions import NotificationAction
from rewind.lib.errors import ApplicationError
from rewind.lib.requestid import current_request_id
from rewind.notifications.apprise_urls import redact
from rewind.notifications.channels import (
    Channel,
    QueuedDelivery,
    channel_get,
    channels_configured,
    channels_for,
    configured_secrets,
)
from rewind.notifications.models import NotificationDelivery, NotificationKind
from rewind.notifications.transport import apprise_send
from rewind.workers.broker import queue_task

logger = logging.getLogger(__name__)
Status = NotificationDelivery.Status
DELIVER_TASK = "rewind.notifications.deliver"
# Longer than any send (Apprise gives up after 30 s): a delivery still "sending" after this
# lost its worker mid-send.
SENDING_LOST_AFTER = timedelta(minutes=10)
# Longer than the longest wait between two tries (the approver e-mail's 8 minutes): a pending
# delivery untouched this long has no task left to send it.
PENDING_IDLE_AFTER = timedelta(minutes=30)
ERROR_MAX = 2000
_NOTIFY_TYPE: dict[str, str] = {
    NotificationKind.RECOVERY_AWAITS_APPROVAL: "info",
    NotificationKind.RECOVERY_EXPIRES_SOON: "warning",
    NotificationKind.UNMOUNT_FAILED: "failure",
    NotificationKind.GUARD_FAILED: "failure",
    NotificationKind.SITE_DOWN: "failure",
    NotificationKind.CHECKPOINT_LEAVING_JOURNAL: "warning",
    NotificationKind.RECOVERY_AWAITS_WRITE_BACK: "info",
    NotificationKind.RECOVERY_RESTORED: "success",
    NotificationKind.RECOVERY_NOT_RESTORED: "failure",
    NotificationKind.AUDIT_CHAIN_BROKEN: "failure",
    NotificationKind.CALL_AWAITS_APPROVAL: "info",
    NotificationKind.STOP_ENGAGED: "warning",
    NotificationKind.STOP_LIFTED: "info",
    NotificationKind.TEST: "info",
}


class DeliveryRetry(Exception):
    """A try failed and tries remain: the task tries again later. The message is redacted."""


def clean_error(text: str) -> str:
    """An error as it may be stored, audited and logged: secrets of every channel masked, bounded."""
    text = redact(" ".join(text.split()), configured_secrets())
    return text if len(text) <= ERROR_MAX else text[: ERROR_MAX - 1] + "…"


def _target(target: models.Model | tuple[str, str] | None) -> tuple[str, str]:
    if target is None:
        return "", ""
    if isinstance(target, tuple):
        return target[0], str(target[1])
    return target._meta.label_lower, str(target.pk)


def notification_send(
    *,
    kind: str,
    dedupe_key: str,
    title: str,
    body: str,
    sites: Iterable[str] = (),
    target: models.Model | tuple[str, str] | None = None,
    request_id: str | None = None,
) -> list[NotificationDelivery]:
    """Tell every channel that hears ``kind`` (and the channels of ``sites``, by site name) once.

    ``dedupe_key`` names the event, including its kind ("recovery:12:awaits-approval"): a
    channel that has a delivery with this key gets nothing more. Records one delivery per
    new channel in the caller's transaction (or its own) and queues them once it commits.
    Returns the deliveries recorded now. Never raises: a failure is logged, and the caller's
    transaction goes on without the notification. Safe to repeat.
    """
    try:
        channels = channels_for(kind, sites)
    except Exception as exc:  # settings Apprise cannot read: log (the type only, the text may hold a URL)
        logger.warning(
            "the channels of the %s notification %s could not be read (%s); not sent",
            kind,
            dedupe_key,
            type(exc).__name__,
        )
        return []
    return _record(
        kind=kind,
        dedupe_key=dedupe_key,
        title=title,
        body=body,
        channels=channels,
        target=target,
        request_id=request_id,
    )


@contextmanager
def notifying(what: str) -> Iterator[None]:
    """Around a part's code that words and records a notification in the middle of its own flow.

    Whatever goes wrong inside is logged and rolls back only itself (a savepoint), never the
    caller's change: the guard still ends, the request is still recorded.
    """
    try:
        with transaction.atomic():
            yield
    except Exception:
        logger.exception("could not record the notification that %s; carrying on without it", what)


def _record(
    *,
    kind: str,
    dedupe_key: str,
    title: str,
    body: str,
    channels: list[Channel],
    target: models.Model | tuple[str, str] | None,
    request_id: str | None,
) -> list[NotificationDelivery]:
    if not channels:
        return []
    dedupe_key = dedupe_key[:200]
    rid = request_id or current_request_id()
    by_key = {c.key: c for c in channels}
    created: list[NotificationDelivery] = []
    try:
        # A savepoint inside the caller's transaction: a failure here rolls back only this.
        with transaction.atomic():
            taken = _taken(dedupe_key, list(by_key))
            for channel in channels:
                if channel.key in taken:
                    continue
                row = _create(kind, dedupe_key, title, body, channel, target, rid)
                if row is not None:
                    created.append(row)
    except Exception as exc:  # a database that refuses the row, mostly: the caller's change goes on without it
        logger.warning(
            "the %s notification %s could not be recorded (%s: %s); not sent", kind, dedupe_key, type(exc).__name__, exc
        )
        return []
    if created:
        queued = [(_queued(d), by_key[d.channel]) for d in created]
        # Each sent once committed; a broker that cannot take it leaves the delivery pending (the
        # settle sweep queues it again): never a failure of what the caller did.
        _queue_all(queued)
    return created


def _taken(dedupe_key: str, channels: list[str]) -> set[str]:
    """The channels that have this event already: one read instead of a failed insert each
    (a sweep finds most events it looks at recorded). The unique constraint still decides a race."""
    return set(
        NotificationDelivery.objects.filter(dedupe_key=dedupe_key, channel__in=channels).values_list(
            "channel", flat=True
        )
    )


def _create(
    kind: str,
    dedupe_key: str,
    title: str,
    body: str,
    channel: Channel,
    target: models.Model | tuple[str, str] | None,
    request_id: str,
) -> NotificationDelivery | None:
    """The new delivery, or None when the event is already recorded for this channel."""
    target_type, target_id = _target(target)
    try:
        with transaction.atomic():
            return NotificationDelivery.objects.create(
                kind=kind,
                dedupe_key=dedupe_key,
                channel=channel.key,
                channel_label=channel.label[:300],
                title=" ".join(title.split())[:250],
                body=body,
                target_type=target_type,
                target_id=target_id,
                request_id=request_id,
                queued_at=timezone.now(),
            )
    except IntegrityError:
        return None  # another process recorded it a moment ago: it sends, not us


def _queued(delivery: NotificationDelivery) -> QueuedDelivery:
    return QueuedDelivery(delivery.pk, delivery.target_type, delivery.target_id, delivery.request_id)


def _queue_one(queued: QueuedDelivery, channel: Channel) -> None:
    if channel.builtin is not None:
        channel.builtin.queue(queued)
    else:
        queue_task(DELIVER_TASK, queued.pk, queued.request_id, what=f"notification #{queued.pk}")


def _queue_all(items: list[tuple[QueuedDelivery, Channel]]) -> None:
    for queued, channel in items:
        try:
            _queue_one(queued, channel)
        except Exception as exc:  # one channel's queueing must not stop the others'
            logger.warning(
                "notification #%s could not be queued (%s); the settle sweep queues it again",
                queued.pk,
                type(exc).__name__,
            )


# --- recording an attempt and its outcome (Apprise channels here, built-in ones from their part) ---
def notification_delivery_get(*, dedupe_key: str, channel: str) -> NotificationDelivery | None:
    return NotificationDelivery.objects.filter(dedupe_key=dedupe_key, channel=channel).first()


def notification_delivery_record(
    *,
    kind: str,
    dedupe_key: str,
    channel: str,
    title: str,
    body: str,
    target: models.Model | tuple[str, str] | None = None,
    request_id: str | None = None,
) -> NotificationDelivery:
    """One channel's delivery of an event, recorded now if it was not (nothing is queued).

    For a built-in channel's task that runs without a recorded delivery: one queued before
    deliveries were recorded, or whose recording failed. Raises ``ApplicationError`` for an
    unknown channel.
    """
    found = channel_get(channel)
    if found is None:
        raise ApplicationError(f"no notification channel {channel!r}")
    dedupe_key = dedupe_key[:200]
    row = _create(kind, dedupe_key, title, body, found, target, request_id or current_request_id())
    return row or NotificationDelivery.objects.get(dedupe_key=dedupe_key, channel=channel)


def notification_delivery_claim(*, delivery: NotificationDelivery) -> bool:
    """Move a pending delivery to sending and count the attempt; False when another task has it
    or it is final. Record the attempt before making it: one claim, one send."""
    won = NotificationDelivery.objects.filter(pk=delivery.pk, status=Status.PENDING).update(
        status=Status.SENDING, attempts=F("attempts") + 1, last_attempt_at=timezone.now()
    )
    if won:
        delivery.refresh_from_db()
    return bool(won)


def notification_delivery_release(*, delivery: NotificationDelivery, error: str) -> None:
    """A try failed and another comes: back to pending, with why (redacted)."""
    delivery.last_error = clean_error(error)
    NotificationDelivery.objects.filter(pk=delivery.pk, status=Status.SENDING).update(
        status=Status.PENDING, last_error=delivery.last_error
    )


def notification_delivery_close(
    *,
    delivery: NotificationDelivery,
    status: str,
    error: str = "",
    from_statuses: tuple[str, ...] = (Status.PENDING, Status.SENDING),
) -> bool:
    """Give the delivery its final status (sent, failed or skipped); False when it had one already.

    Runs in the caller's transaction, so a part can audit the outcome in the same one.
    """
    assert status in NotificationDelivery.FINAL
    error = clean_error(error) if error else ""
    now = timezone.now()
    won = NotificationDelivery.objects.filter(pk=delivery.pk, status__in=from_statuses).update(
        status=status, last_error=error or F("last_error"), finished_at=now
    )
    if won:
        delivery.refresh_from_db()
    return bool(won)


def _close_audited(
    delivery: NotificationDelivery,
    status: str,
    error: str = "",
    from_statuses: tuple[str, ...] = (Status.PENDING, Status.SENDING),
) -> bool:
    with transaction.atomic():
        if not notification_delivery_close(delivery=delivery, status=status, error=error, from_statuses=from_statuses):
            return False
        if status in (Status.SENT, Status.FAILED):
            audit_record(
                actor=SYSTEM,
                action=NotificationAction.SENT if status == Status.SENT else NotificationAction.FAILED,
                target=delivery,
                data=delivery.audit_data(),
                request_id=delivery.request_id or None,
            )
    return True


def notification_deliver(*, delivery_id: int, last_try: bool) -> str:
    """Send one recorded delivery through its Apprise channel; returns what happened, in a word.

    Raises ``DeliveryRetry`` when the service did not take it and ``last_try`` is false (the
    task tries again later); on the last try the delivery is recorded failed instead. A
    delivery that is not pending (sent, failed, or being sent by another task) is left alone,
    so a redelivered or repeated task sends nothing twice. No transaction is held across the send.
    """
    delivery = NotificationDelivery.objects.filter(pk=delivery_id).first()
    if delivery is None:
        return "gone"
    if delivery.status != Status.PENDING:
        return f"already {delivery.status}"
    channel = channel_get(delivery.channel)
    if channel is None or not channel.url:
        _close_audited(delivery, Status.FAILED, "the channel is no longer configured")
        return "failed"
    if not notification_delivery_claim(delivery=delivery):
        return "taken by another task"
    try:
        error = apprise_send(
            channel.url, title=delivery.title, body=delivery.body, notify_type=_NOTIFY_TYPE.get(delivery.kind, "info")
        )
    except Exception as exc:  # a fault inside an Apprise plugin is this channel's failure, like any other
        error = f"{type(exc).__name__}: {exc}"
    if error is None:
        _close_audited(delivery, Status.SENT)
        return "sent"
    error = clean_error(error)
    if last_try:
        _close_audited(delivery, Status.FAILED, error)
        logger.warning(
            "notification #%s (%s) to %s failed after %d tries: %s",
            delivery.pk,
            delivery.kind,
            delivery.channel_label,
            delivery.attempts,
            error,
        )
        return "failed"
    notification_delivery_release(delivery=delivery, error=error)
    raise DeliveryRetry(error)


def notification_test_send(*, actor: Actor, channel: str | None = None, request_id: str | None = None) -> int:
    """Send a test message to one Apprise channel (by key) or all of them; returns how many were queued.

    Through the same records and task as every event. Raises ``ApplicationError`` when there is
    no such channel. The built-in channels are not tested here: the approver e-mail goes to the
    people who may approve one request, and a test has no request.
    """
    chosen = [c for c in channels_configured() if c.builtin is None and (channel is None or c.key == channel)]
    if not chosen:
        raise ApplicationError(
            "no such notification channel" if channel else "no notification URL is configured (REWIND_NOTIFY_URLS)"
        )
    now = timezone.now()
    body = (
        f"{actor.name} sent this test from the zerto-rewind admin at {now:%Y-%m-%d %H:%M:%S} UTC "
        f"to check that this channel works. Nothing needs doing.\n{settings.REWIND_PUBLIC_URL}/admin/"
    )
    rid = request_id or current_request_id()
    with transaction.atomic():
        audit_record(
            actor=actor,
            action=NotificationAction.TEST_REQUESTED,
            data={"channels": [c.label for c in chosen]},
            request_id=rid,
        )
        created = _record(
            kind=NotificationKind.TEST,
            dedupe_key=f"test:{uuid.uuid4().hex}",
            title="zerto-rewind: test notification",
            body=body,
            channels=chosen,
            target=None,
            request_id=rid,
        )
    return len(created)


def notifications_settle(*, now: datetime | None = None) -> dict[str, int]:
    """The beat's sweep for deliveries whose task was lost. Safe to overlap (compare-and-swap).

    A delivery still "sending" after ``SENDING_LOST_AFTER`` lost its worker mid-send: it may
    have gone out, and sending it again could tell the event twice, so it is recorded failed.
    A delivery "pending" and untouched for ``PENDING_IDLE_AFTER`` has no task (the broker
    refused it, or a retry message was lost): it is queued again.
    """
    now = now or timezone.now()
    lost = 0
    stuck = NotificationDelivery.objects.filter(status=Status.SENDING, last_attempt_at__lt=now - SENDING_LOST_AFTER)
    for delivery in stuck[:500]:
        reason = "the worker stopped while sending it; it may have gone out, so it is not sent again"
        lost += _close_audited(delivery, Status.FAILED, reason, from_statuses=(Status.SENDING,))
    idle = now - PENDING_IDLE_AFTER
    requeued = 0
    waiting = NotificationDelivery.objects.filter(status=Status.PENDING, queued_at__lt=idle).filter(
        Q(last_attempt_at__isnull=True) | Q(last_attempt_at__lt=idle)
    )
    for delivery in waiting[:500]:
        # Whoever moves queued_at on queues it; an overlapping sweep finds it moved.
        if not NotificationDelivery.objects.filter(pk=delivery.pk, queued_at=delivery.queued_at).update(queued_at=now):
            continue
        channel = channel_get(delivery.channel)
        if channel is None:
            _close_audited(delivery, Status.FAILED, "the channel is no longer configured")
            continue
        _queue_all([(_queued(delivery), channel)])
        requeued += 1
    return {"lost": lost, "requeued": requeued}
