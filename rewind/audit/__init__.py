"""The audit log: one ``audit_record`` service that everything uses, and chain checks.

Fail-closed: call ``audit_record`` inside the same ``transaction.atomic()`` block as the change it describes, so
a failed audit write rolls the change back with it. Events are chained just after they commit
(``rewind.audit.chaining``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import connection, models, transaction
from django.utils import timezone

from rewind.audit.canonical import GENESIS_HASH, MASK, compute_hash, event_hash, mask_secrets, storable
from rewind.audit.chaining import AuditChainError, chain_locked, chain_pending, insert_chained, insert_unchained
from rewind.audit.models import AuditChainHead, AuditEvent
from rewind.lib.actors import SYSTEM, Actor  # re-exported: callers name actors with the log
from rewind.lib.requestid import current_request_id

__all__ = [
    "GENESIS_HASH",
    "MASK",
    "SYSTEM",
    "Actor",
    "AuditChainError",
    "AuditEntry",
    "ChainProblem",
    "audit_append",
    "audit_record",
    "chain_pending",
    "compute_hash",
    "event_hash",
    "mask_secrets",
    "storable",
    "verify_chain",
    "verify_links",
]


def _target_fields(target: models.Model | tuple[str, str] | None) -> tuple[str, str, str]:
    if target is None:
        return "", "", ""
    if isinstance(target, tuple):
        kind, ident = target
        return kind, storable(str(ident)), storable(str(ident))[:255]
    return target._meta.label_lower, str(target.pk), storable(str(target))[:255]


@dataclass(frozen=True)
class AuditEntry:
    """One event to append; see ``audit_record`` for the meaning of the fields."""

    actor: Actor
    action: str
    target: models.Model | tuple[str, str] | None = None
    data: dict[str, Any] | None = None
    request_id: str | None = None

    def __post_init__(self) -> None:
        # A code from ``rewind.audit.actions`` is a StrEnum: store and hash its plain text,
        # whatever a database driver would make of an enum.
        object.__setattr__(self, "action", str(self.action))


def audit_record(
    *,
    actor: Actor,
    action: str,
    target: models.Model | tuple[str, str] | None = None,
    data: dict[str, Any] | None = None,
    request_id: str | None = None,
) -> AuditEvent:
    """Append one event and return it (as the database holds it).

    Must run inside the caller's transaction (outside one it opens its own): the event commits or rolls back
    with the change it describes. Raises whatever the database raises, and then the caller's transaction can
    only roll back: no savepoint lets a change commit without its event. The event comes back chained when no
    other chainer was at work, else with ``seq`` empty until it is.
    """
    (pk,) = audit_append([AuditEntry(actor, action, target, data, request_id)])
    return AuditEvent.objects.get(pk=pk)


def audit_append(entries: Sequence[AuditEntry], *, chain: bool = True) -> list[int]:
    """Record ``entries`` in order in the caller's transaction; their ids. Same contract as ``audit_record``.

    ``chain=False`` (PostgreSQL; SQLite chains as it inserts): the rows wait, and this transaction chains
    nothing, now or after its commit. For a caller whose next append follows at once and chains whatever waits
    (a gateway call's decision, followed by the call's own ``mcp.tool.called`` row); the beat chains what a
    process that died in between left waiting.
    """
    if not entries:
        return []
    with transaction.atomic(savepoint=False):
        rows = [_new_row(entry) for entry in entries]
        if connection.vendor == "sqlite":  # one writer at a time: it holds the chain as it is
            return insert_chained(rows)
        if not chain:
            return insert_unchained(rows, try_lock=False)[0]
        ids, chain_free = insert_unchained(rows)
        if chain_free:
            chain_locked()
        transaction.on_commit(chain_pending, robust=True)
    return ids


def _new_row(entry: AuditEntry) -> dict[str, Any]:
    target_type, target_id, target_repr = _target_fields(entry.target)
    return {
        "time": timezone.now(),
        "actor_type": entry.actor.type,
        "actor": storable(entry.actor.name)[:150],
        "action": entry.action,
        "target_type": target_type,
        "target_id": target_id,
        "target_repr": target_repr,
        # mask_secrets returns plain JSON values: what the chainer reads back and hashes is this.
        "data": mask_secrets(entry.data or {}),
        "request_id": entry.request_id or current_request_id(),
    }


@dataclass(frozen=True)
class ChainProblem:
    seq: int
    reason: str


def verify_links(
    *,
    after_seq: int = 0,
    after_hash: str = GENESIS_HASH,
    up_to: int | None = None,
    head_seq: int | None = None,
    batch_size: int = 2000,
) -> tuple[int, ChainProblem | None]:
    """Walk the events after ``after_seq`` (whose hash is ``after_hash``) in order, up to ``up_to``; (the last
    intact event's seq, the first problem or None). An event after a gap that lies past ``head_seq`` is the
    problem itself (no chainer put it there), whereas a gap below the head is a removal."""
    expected_prev = after_hash
    expected_seq = after_seq + 1
    for event in _iter_events(batch_size, after_seq, up_to):
        if event.seq != expected_seq and head_seq is not None and (event.seq or 0) > max(head_seq, expected_seq):
            return expected_seq - 1, ChainProblem(
                event.seq or 0,
                f"it lies past the end of the chain (#{expected_seq - 1}): no chainer of this service wrote it",
            )
        if event.seq != expected_seq:
            return expected_seq - 1, ChainProblem(expected_seq, "this event is missing from the chain")
        if event.prev_hash != expected_prev:
            return expected_seq - 1, ChainProblem(event.seq, "its previous-hash does not match the event before it")
        if event_hash(event) != event.hash:
            return expected_seq - 1, ChainProblem(event.seq, "its content does not match its hash")
        expected_prev = event.hash
        expected_seq += 1
    return expected_seq - 1, None


def verify_chain(*, batch_size: int = 2000) -> tuple[int, ChainProblem | None]:
    """Walk the chain in order; (events checked, the first problem or None).

    A chain cut at its end, or emptied, still links: the head row notices what it can, the anchors
    (``rewind.audit.anchors``) the rest. An event still not chained ``REWIND_AUDIT_CHAIN_LAG_S`` after it was
    recorded is a problem too: nothing protects it, and nothing will chain it.
    """
    # The head first: events chained during the walk only take the chain past it.
    head = AuditChainHead.objects.filter(pk=1).first()
    checked, problem = verify_links(batch_size=batch_size, head_seq=head.last_seq if head else 0)
    if problem is not None:
        return checked, problem
    if head is not None and head.last_seq:
        at_head = AuditEvent.objects.filter(seq=head.last_seq).values_list("hash", flat=True).first()
        if head.last_seq > checked or at_head != head.last_hash:
            return checked, ChainProblem(checked + 1, "events at the end of the chain are missing")
    return checked, unchained_problem(next_seq=checked + 1)


def unchained_problem(*, next_seq: int) -> ChainProblem | None:
    """The events recorded longer than ``REWIND_AUDIT_CHAIN_LAG_S`` ago that are still not chained, as a problem."""
    lag = settings.REWIND_AUDIT_CHAIN_LAG_S
    stale = AuditEvent.objects.filter(seq__isnull=True, time__lt=timezone.now() - timedelta(seconds=lag))
    oldest = stale.order_by("id").values_list("id", "time").first()
    if oldest is None:
        return None
    count = stale.count()
    return ChainProblem(
        next_seq,
        f"{count} event(s) recorded more than {lag:g} s ago are not chained "
        f"(the oldest: id {oldest[0]}, recorded {oldest[1].isoformat(timespec='seconds')}): "
        "the chain does not protect them; is every process committing and the beat running?",
    )


def _iter_events(batch_size: int, after_seq: int = 0, up_to: int | None = None) -> Iterator[AuditEvent]:
    last = after_seq
    while True:
        rows = AuditEvent.objects.filter(seq__gt=last).order_by("seq")
        if up_to is not None:
            rows = rows.filter(seq__lte=up_to)
        batch = list(rows[:batch_size])
        if not batch:
            return
        yield from batch
        last = batch[-1].seq or 0  # chained: the filter leaves the others out
