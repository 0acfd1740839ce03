"""The audit log: one ``audit_record`` service that everything uses, and chain checks.

Fail-closed: call ``audit_record`` inside the same ``transaction.atomic()`` block as the
change it describes. If the audit write fails the exception propagates and the change is
rolled back with it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db import IntegrityError, connection, models, transaction
from django.utils import timezone

from rewind.actors import SYSTEM, Actor  # noqa: F401  (re-exported: callers name actors with the log)
from rewind.audit.models import AuditChainHead, AuditEvent
from rewind.requestid import current_request_id

GENESIS_HASH = "0" * 64
MASK = "***"
# Keys whose values are secrets wherever they appear in audit data.
_SECRET_KEY = re.compile(r"pass(word|wd|phrase)?|secret|token|authorization|api[_-]?key|credential|cookie", re.I)
# Values that look like bearer tokens or our own agent tokens, whatever their key.
_SECRET_VALUE = re.compile(r"(?i)^(bearer\s+\S+|rwd_[A-Za-z0-9_-]{20,})$")


@functools.lru_cache(maxsize=4096)
def _secret_key(key: str) -> bool:
    return _SECRET_KEY.search(key) is not None  # keys repeat endlessly: decide each once


def _secret_value(text: str) -> bool:
    head = text.lstrip()[:6].lower()  # cheap first look: only "bearer …" and "rwd_…" can match
    return (head[:4] == "rwd_" or head == "bearer") and _SECRET_VALUE.match(text.strip()) is not None


def storable(text: str) -> str:
    """``text`` as every database stores it: PostgreSQL refuses NUL in text and JSON, so it becomes U+FFFD.

    Audit rows quote what callers sent (a tool's arguments, a tool name), and a NUL there must not
    make the audit write, and so the action, fail.
    """
    return text.replace("\x00", "\ufffd") if "\x00" in text else text


def mask_secrets(value: Any) -> Any:
    """A JSON-ready copy of ``value`` with secret-looking keys and values replaced, in its canonical form.

    What this returns is hashed and stored, so it must come back from either database as it went
    in: no NUL (``storable``), and a float with an integral value as the integer (PostgreSQL's jsonb
    gives ``1e16`` and ``-0.0`` back as ``10000000000000000`` and ``0``).
    """
    if isinstance(value, dict):
        return {
            storable(str(k)): (MASK if _secret_key(str(k)) and v not in (None, "") else mask_secrets(v))
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [mask_secrets(v) for v in value]
    if isinstance(value, str):
        return MASK if _secret_value(value) else storable(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)  # NaN and infinity are not JSON; PostgreSQL would refuse the row
        return int(value) if value.is_integer() else value
    if isinstance(value, (int, bool)) or value is None:
        return value
    return storable(str(value))


def _canonical(fields: dict[str, Any]) -> bytes:
    return json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def compute_hash(
    *,
    seq: int,
    time: datetime,
    actor_type: str,
    actor: str,
    action: str,
    target_type: str,
    target_id: str,
    target_repr: str,
    data: Any,
    request_id: str,
    prev_hash: str,
) -> str:
    content = {
        "seq": seq,
        "time": time.astimezone(UTC).isoformat(timespec="microseconds"),
        "actor_type": actor_type,
        "actor": actor,
        "action": action,
        "target_type": target_type,
        "target_id": target_id,
        "target_repr": target_repr,
        "data": data,
        "request_id": request_id,
        "prev_hash": prev_hash,
    }
    return hashlib.sha256(_canonical(content)).hexdigest()


def event_hash(event: AuditEvent) -> str:
    return compute_hash(
        seq=event.seq,
        time=event.time,
        actor_type=event.actor_type,
        actor=event.actor,
        action=event.action,
        target_type=event.target_type,
        target_id=event.target_id,
        target_repr=event.target_repr,
        data=event.data,
        request_id=event.request_id,
        prev_hash=event.prev_hash,
    )


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
    """Append one event to the chain and return it (as the database holds it).

    Must run inside the caller's transaction (outside one it opens its own); the chain head
    row is locked for the rest of that transaction, so appends are serialized and a
    rolled-back change leaves no event behind. Raises whatever the database raises, and then
    the caller's whole transaction can only roll back: no savepoint lets a change commit
    without its event.
    """
    (seq,) = audit_append([AuditEntry(actor, action, target, data, request_id)])
    return AuditEvent.objects.get(seq=seq)


def audit_append(entries: Sequence[AuditEntry]) -> list[int]:
    """Append ``entries`` in order under one head lock; return their sequence numbers.

    Same contract as ``audit_record``. Three statements whatever the batch size: lock and
    read the head, insert every row, move the head. They are plain SQL on purpose: the
    MCP endpoint audits every tool call, and building the same statements through the ORM
    cost about ten times more CPU than the rows themselves (measured: a batch of six went
    from 2.9 ms to well under 1 ms). What is hashed is what is stored, and ``verify_chain``
    reads it back through the ORM, so the two ways cannot drift apart unnoticed.
    """
    if not entries:
        return []
    with transaction.atomic(savepoint=False):
        seq, prev = _locked_head_state()
        first = seq + 1
        rows = []
        for entry in entries:
            seq += 1
            row = _new_row(entry, seq=seq, prev_hash=prev)
            prev = row["hash"]
            rows.append(row)
        sql = _statements()
        with connection.cursor() as cursor:
            cursor.executemany(sql.insert, [_db_params(row) for row in rows])
            cursor.execute(sql.move_head, [seq, prev])
    return list(range(first, seq + 1))


def _new_row(entry: AuditEntry, *, seq: int, prev_hash: str) -> dict[str, Any]:
    target_type, target_id, target_repr = _target_fields(entry.target)
    row: dict[str, Any] = {
        "seq": seq,
        "time": timezone.now(),
        "actor_type": entry.actor.type,
        "actor": storable(entry.actor.name)[:150],
        "action": entry.action,
        "target_type": target_type,
        "target_id": target_id,
        "target_repr": target_repr,
        # mask_secrets returns plain JSON values, so what is hashed is what the database gives back.
        "data": mask_secrets(entry.data or {}),
        "request_id": entry.request_id or current_request_id(),
        "prev_hash": prev_hash,
    }
    row["hash"] = compute_hash(**row)
    return row


_COLUMNS = (
    "seq",
    "time",
    "actor_type",
    "actor",
    "action",
    "target_type",
    "target_id",
    "target_repr",
    "data",
    "request_id",
    "prev_hash",
    "hash",
)


@dataclass(frozen=True)
class _Sql:
    insert: str
    move_head: str
    read_head: str


@functools.cache
def _statements_for(vendor: str) -> _Sql:
    quote = connection.ops.quote_name
    events, head = quote(AuditEvent._meta.db_table), quote(AuditChainHead._meta.db_table)
    column_of = {f.name: f.column or f.name for f in AuditEvent._meta.concrete_fields}
    columns = ", ".join(quote(column_of[c]) for c in _COLUMNS)
    placeholders = ", ".join(["%s"] * len(_COLUMNS))
    lock = " FOR UPDATE" if connection.features.has_select_for_update else ""
    return _Sql(
        insert=f"INSERT INTO {events} ({columns}) VALUES ({placeholders})",
        move_head=f"UPDATE {head} SET {quote('last_seq')} = %s, {quote('last_hash')} = %s WHERE {quote('id')} = 1",
        read_head=f"SELECT {quote('last_seq')}, {quote('last_hash')} FROM {head} WHERE {quote('id')} = 1{lock}",
    )


def _statements() -> _Sql:
    return _statements_for(connection.vendor)


def _db_params(row: dict[str, Any]) -> list[Any]:
    ops = connection.ops
    return [
        ops.adapt_datetimefield_value(row[c])
        if c == "time"
        else ops.adapt_json_value(row[c], None)
        if c == "data"
        else row[c]
        for c in _COLUMNS
    ]


class AuditChainError(Exception):
    pass


def _locked_head_state() -> tuple[int, str]:
    """(last seq, last hash) of the chain, with the head row locked until the transaction ends."""
    with connection.cursor() as cursor:
        cursor.execute(_statements().read_head)
        found = cursor.fetchone()
    if found is not None:
        return int(found[0]), str(found[1])
    head = _create_head()
    return head.last_seq, head.last_hash


def _create_head() -> AuditChainHead:
    try:
        with transaction.atomic():
            AuditChainHead.objects.create(pk=1)
    except IntegrityError:
        # A concurrent first writer created it; wait for its lock like everyone else.
        return AuditChainHead.objects.select_for_update().get(pk=1)
    if AuditEvent.objects.exists():
        # We just made a head although events exist: the real head was removed, and a new
        # one would fork the chain from the genesis hash. Raising rolls our head back.
        raise AuditChainError("the audit chain head is missing; run manage.py audit_verify")
    return AuditChainHead.objects.select_for_update().get(pk=1)


@dataclass(frozen=True)
class ChainProblem:
    seq: int
    reason: str


def verify_links(
    *, after_seq: int = 0, after_hash: str = GENESIS_HASH, up_to: int | None = None, batch_size: int = 2000
) -> tuple[int, ChainProblem | None]:
    """Walk the events after ``after_seq`` (whose hash is ``after_hash``) in order, up to ``up_to``.

    Returns (the last intact event's seq, the first problem or None).
    """
    expected_prev = after_hash
    expected_seq = after_seq + 1
    for event in _iter_events(batch_size, after_seq, up_to):
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
    """Walk the chain in order; return (events checked, the first problem or None).

    A chain cut at its end, or emptied, still links: the head row (which only moves forward in the
    database) notices what it can, and the anchors published outside the database
    (``rewind.audit.anchors``) notice the rest.
    """
    checked, problem = verify_links(batch_size=batch_size)
    if problem is not None:
        return checked, problem
    last_hash = AuditEvent.objects.filter(seq=checked).values_list("hash", flat=True).first() or GENESIS_HASH
    head = AuditChainHead.objects.filter(pk=1).first()
    if head is not None and (head.last_seq != checked or head.last_hash != last_hash):
        return checked, ChainProblem(checked + 1, "events at the end of the chain are missing")
    return checked, None


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
        last = batch[-1].seq
