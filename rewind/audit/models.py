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
    """One entry of the append-only, hash-chained audit log.

    Written only by ``rewind.audit.audit_record`` (or ``audit_append``). ``hash`` covers the canonical content of
    the row including ``prev_hash``, so changing, removing or reordering any row breaks the
    chain from there on (``manage.py audit_verify``). Database triggers refuse UPDATE (and
    DELETE on PostgreSQL); the ORM refuses both.
    """

    class ActorType(models.TextChoices):  # the types of rewind.actors.Actor
        AGENT = "agent"
        USER = "user"
        SYSTEM = "system"

    seq = models.PositiveBigIntegerField(unique=True, help_text="Position in the chain: 1, 2, 3, ...")
    time = models.DateTimeField(db_index=True)
    actor_type = models.CharField(max_length=10, choices=ActorType.choices)
    actor = models.CharField(max_length=150)
    action = models.CharField(max_length=100, db_index=True)
    target_type = models.CharField(max_length=50, blank=True)
    target_id = models.CharField(max_length=255, blank=True)
    target_repr = models.CharField(max_length=255, blank=True)
    data = models.JSONField(default=dict)
    request_id = models.CharField(max_length=64, db_index=True, blank=True)
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64, unique=True)

    objects = AuditEventQuerySet.as_manager()

    class Meta:
        ordering = ["-seq"]
        indexes = [models.Index(fields=["target_type", "target_id"])]

    def __str__(self) -> str:
        return f"#{self.seq} {self.action} by {self.actor_type}:{self.actor}"

    def delete(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise AppendOnlyError("audit events are append-only")


class AuditChainHead(models.Model):
    """A single row holding the chain's last hash; locking it serializes appends.

    ``SELECT ... FOR UPDATE`` on this row makes concurrent writers on PostgreSQL queue up
    instead of forking the chain; on SQLite the IMMEDIATE transaction does the same.
    """

    last_seq = models.PositiveBigIntegerField(default=0)
    last_hash = models.CharField(max_length=64, default="0" * 64)

    def __str__(self) -> str:
        return f"chain head at #{self.last_seq}"
