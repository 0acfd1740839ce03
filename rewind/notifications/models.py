"""One row per (event, channel): what was to be told, where, and how it went."""

from __future__ import annotations

from typing import Any

from django.db import models


class NotificationKind(models.TextChoices):
    """The events the channels hear of. The value is stored and shown; keep it."""

    RECOVERY_AWAITS_APPROVAL = "recovery.awaits_approval", "a recovery awaits approval"
    RECOVERY_EXPIRES_SOON = "recovery.expires_soon", "a pending recovery expires soon"
    UNMOUNT_FAILED = "flr.unmount_failed", "a mount of ours could not be unmounted"
    GUARD_FAILED = "guard.failed", "a guard failed or timed out"
    SITE_DOWN = "site.down", "a site is unreachable"
    CHECKPOINT_LEAVING_JOURNAL = "checkpoint.leaving_journal", "a guard's checkpoint is about to leave the journal"
    RECOVERY_AWAITS_WRITE_BACK = "recovery.awaits_write_back", "a restore in place awaits its write-back click"
    RECOVERY_RESTORED = "recovery.restored", "a file was written back into a guest and verified"
    RECOVERY_NOT_RESTORED = "recovery.not_restored", "a file was not (fully) written back into a guest"
    AUDIT_CHAIN_BROKEN = "audit.chain_broken", "the audit chain failed a verification"
    CALL_AWAITS_APPROVAL = "call.awaits_approval", "a call waits for a person's approval"
    STOP_ENGAGED = "stop.engaged", "a person stopped guarded changes"
    STOP_LIFTED = "stop.lifted", "a person lifted a stop"
    TEST = "test", "a test notification"


class NotificationDelivery(models.Model):
    """One event for one channel, recorded before it is sent (``rewind.notifications.services``).

    ``(dedupe_key, channel)`` is unique: whoever records an event for a channel second (a
    repeated sweep, a redelivered task, a concurrent process) finds it taken and sends nothing.
    ``channel`` is a key without any secret (``apprise:<digest>`` or a built-in's name); the
    Apprise URL itself is only in the settings, and ``channel_label`` and ``last_error`` are
    redacted before they are stored.
    """

    class Status(models.TextChoices):
        PENDING = "pending"  # recorded; its task is queued, or waits for its next try
        SENDING = "sending"  # a task is sending it now
        SENT = "sent"
        FAILED = "failed"  # every try failed, the channel is gone, or a send's outcome was lost
        SKIPPED = "skipped"  # nothing to send after all (no recipients, no mail server, the event is over)

    FINAL = (Status.SENT, Status.FAILED, Status.SKIPPED)

    kind = models.CharField(max_length=40, choices=NotificationKind.choices, db_index=True)
    dedupe_key = models.CharField(max_length=200, help_text="The event; sent at most once per channel.")
    channel = models.CharField(max_length=64, help_text="The channel's key (no secret in it).")
    channel_label = models.CharField(max_length=300, help_text="The channel as people see it, credentials hidden.")
    title = models.CharField(max_length=250)
    body = models.TextField()
    target_type = models.CharField(max_length=100, blank=True)
    target_id = models.CharField(max_length=64, blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING, db_index=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    last_error = models.TextField(blank=True)
    request_id = models.CharField(max_length=64, blank=True, db_index=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    queued_at = models.DateTimeField(null=True, blank=True, help_text="When its task was last queued.")
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "notification delivery"
        verbose_name_plural = "notification deliveries"
        ordering = ["-created_at", "-pk"]
        constraints = [
            models.UniqueConstraint(fields=["dedupe_key", "channel"], name="notification_once_per_channel"),
        ]
        permissions = [("send_test_notification", "Can send a test notification to the channels")]

    def __str__(self) -> str:
        return f"{self.kind} → {self.channel_label}"

    def audit_data(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "event": self.dedupe_key,
            "channel": self.channel_label,
            "attempts": self.attempts,
            "about": f"{self.target_type}:{self.target_id}" if self.target_type else "",
            "error": self.last_error,
        }
