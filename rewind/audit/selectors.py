"""Reads of the audit log (database only)."""

from __future__ import annotations

from datetime import datetime

from django.db.models import QuerySet

from rewind.audit.models import AuditEvent
from rewind.errors import NotFoundError


def audit_event_list(
    *,
    request_id: str | None = None,
    action: str | None = None,
    actor: str | None = None,
    actor_type: str | None = None,
    target_type: str | None = None,
    target_id: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> QuerySet[AuditEvent]:
    """Audit events matching every given filter (exact matches; ``since`` inclusive, ``until`` exclusive)."""
    qs = AuditEvent.objects.all()
    exact = {
        "request_id": request_id,
        "action": action,
        "actor": actor,
        "actor_type": actor_type,
        "target_type": target_type,
        "target_id": target_id,
    }
    qs = qs.filter(**{k: v for k, v in exact.items() if v})
    if since is not None:
        qs = qs.filter(time__gte=since)
    if until is not None:
        qs = qs.filter(time__lt=until)
    return qs.order_by("-seq")


def audit_event_get(seq: int) -> AuditEvent:
    event = AuditEvent.objects.filter(seq=seq).first()
    if event is None:
        raise NotFoundError(f"there is no audit event #{seq}")
    return event
