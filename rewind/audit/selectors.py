"""Reads of the audit log (database only)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, cast

from django.db.models import Count, F, Q, QuerySet
from django.db.models.fields.json import KT

from rewind.audit.actions import AuditLogAction
from rewind.audit.models import AuditChainHead, AuditEvent
from rewind.lib.errors import NotFoundError


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
    """Audit events matching every given filter (exact matches; ``since`` inclusive, ``until`` exclusive),
    newest recording first: the events not chained yet are listed too, where they were recorded."""
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
    return qs.order_by("-id")


def audit_event_get(seq: int) -> AuditEvent:
    event = AuditEvent.objects.filter(seq=seq).first()
    if event is None:
        raise NotFoundError(f"there is no audit event #{seq}")
    return event


def audit_chain_position() -> tuple[int, str]:
    """``(seq, hash)`` of the chain's end as its head row records it; ``(0, "")`` while nothing is chained. Nothing
    will later be chained at or below it (chainers move the head with what they link, in commit order)."""
    row = AuditChainHead.objects.filter(pk=1).values_list("last_seq", "last_hash").first()
    return (row[0], row[1]) if row and row[0] else (0, "")


def audit_anchored_seq() -> int | None:
    """The newest event published in an anchor, as the chain's head row records it; None before the first."""
    return AuditChainHead.objects.filter(pk=1).values_list("anchored_seq", flat=True).first()


def audit_event_hash(seq: int) -> str | None:
    return AuditEvent.objects.filter(seq=seq).values_list("hash", flat=True).first()


def audit_counts(
    *, actions: Sequence[str], keys: Sequence[str], after_seq: int, upto_seq: int
) -> list[tuple[tuple[str, ...], int]]:
    """Events of ``actions`` with ``after_seq < seq <= upto_seq``, counted by ``keys`` in one GROUP BY: a key is a
    column (``action``, ``target_id``, ``actor_type``) or ``data.<name>`` (``""`` where it is missing)."""
    columns: dict[str, Any] = {
        f"k{i}": KT(f"data__{key.removeprefix('data.')}") if key.startswith("data.") else F(key)
        for i, key in enumerate(keys)
    }
    rows: Iterable[dict[str, Any]] = cast(
        Any,
        AuditEvent.objects.filter(action__in=list(actions), seq__gt=after_seq, seq__lte=upto_seq)
        .order_by()
        .values(**columns)
        .annotate(n=Count("seq")),
    )
    return [
        (tuple("" if row[f"k{i}"] is None else str(row[f"k{i}"]) for i in range(len(keys))), row["n"]) for row in rows
    ]


VERIFICATION_ACTIONS = (AuditLogAction.CHAIN_VERIFIED, AuditLogAction.CHAIN_BROKEN)


def audit_last_verification() -> AuditEvent | None:
    """The newest recorded check of the chain (``manage.py audit_verify``), whatever it found."""
    return AuditEvent.objects.filter(action__in=[str(a) for a in VERIFICATION_ACTIONS]).order_by("-id").first()


def audit_event_trail(*, targets: Iterable[tuple[str, str]], request_ids: Iterable[str] = ()) -> QuerySet[AuditEvent]:
    """Everything that happened in the calls that touched any of ``targets``, oldest recording first (chained or
    not). A target is ``(target_type, target_id)`` as stored; the calls are the request ids of the events on
    those targets, plus ``request_ids``."""
    on_targets = Q()
    for target_type, target_id in targets:
        on_targets |= Q(target_type=target_type, target_id=str(target_id))
    ids = {rid for rid in request_ids if rid}
    if on_targets:
        ids |= set(AuditEvent.objects.filter(on_targets).exclude(request_id="").values_list("request_id", flat=True))
    return AuditEvent.objects.filter(
        Q(request_id__in=ids) | on_targets if on_targets else Q(request_id__in=ids)
    ).order_by("id")
