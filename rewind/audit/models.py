from __future__ import annotations

from typing import Any, NoReturn

from django.db import models


class AppendOnlyError(Exception):
    pass


class AuditEventQuerySet(models.QuerySet["AuditEvent"]):
    def update(self, **kwargs: Any) -> NoReturn:
        raise AppendOnlyError("audit events are append-only")

    def delete(self) -> NoReturn:
        raise AppendOnlyError("audit events are append-only")


class AuditEvent(models.Model):
    """One entry of the append-only, hash-chained audit log (docs/audit-integrity.md).

    Written only by ``rewind.audit.audit_record``, unchained; the chainer then sets ``seq``, ``prev_hash`` and
    ``hash`` once, in commit order. ``hash`` covers the row's canonical content including ``prev_hash``, so
    changing, removing or reordering a chained row breaks the chain from there on. Database triggers and the ORM
    refuse every DELETE and every UPDATE but the chaining. ``id`` is the order of recording.
    """

    class ActorType(models.TextChoices):  # the types of rewind.lib.actors.Actor
        AGENT = "agent"
        USER = "user"
        SYSTEM = "system"

    seq = models.PositiveBigIntegerField(
        unique=True, null=True, blank=True, help_text="Position in the chain: 1, 2, 3, ...; empty until chained"
    )
    time = models.DateTimeField(db_index=True)
    actor_type = models.CharField(max_length=10, choices=ActorType.choices)
    actor = models.CharField(max_length=150)
    action = models.CharField(max_length=100, db_index=True)
    target_type = models.CharField(max_length=50, blank=True)
    target_id = models.CharField(max_length=255, blank=True)
    target_repr = models.CharField(max_length=255, blank=True)
    data = models.JSONField(default=dict)
    request_id = models.CharField(max_length=64, db_index=True, blank=True)
    # NULL, not "", until chained: ``hash`` is unique and many events may wait at once.
    prev_hash = models.CharField(max_length=64, null=True, blank=True)  # noqa: DJ001
    hash = models.CharField(max_length=64, unique=True, null=True, blank=True)

    objects = AuditEventQuerySet.as_manager()

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["target_type", "target_id"])]

    def __str__(self) -> str:
        position = f"#{self.seq}" if self.seq is not None else "(not chained yet)"
        return f"{position} {self.action} by {self.actor_type}:{self.actor}"

    def delete(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise AppendOnlyError("audit events are append-only")


class AuditChainHead(models.Model):
    """A single row holding the chain's last hash; locking it serializes the chainers.

    The database keeps it single and moves it only forward, onto an event with exactly that hash.
    ``anchored_seq`` (only forward too) remembers that anchors were published, so an anchor file found missing
    or cut back is a break. Only a chainer locks it (``SELECT ... FOR UPDATE``): one that got past the chain
    lock queues here instead of forking the chain.
    """

    last_seq = models.PositiveBigIntegerField(default=0)
    last_hash = models.CharField(max_length=64, default="0" * 64)
    anchored_seq = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="The newest event published in an anchor; empty until the first"
    )

    def __str__(self) -> str:
        return f"chain head at #{self.last_seq}"
