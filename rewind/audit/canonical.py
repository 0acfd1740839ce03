"""What the audit log hashes, and how: secrets masked, values in the form both databases give back.

Shared by the write path (``rewind.audit.chaining``) and the checks (``rewind.audit``).
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import re
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rewind.audit.models import AuditEvent

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
    """``text`` as every database stores it: PostgreSQL refuses NUL in text and JSON, so it becomes U+FFFD (audit
    rows quote what callers sent, and a NUL there must not make the audit write, and so the action, fail)."""
    return text.replace("\x00", "\ufffd") if "\x00" in text else text


def mask_secrets(value: Any) -> Any:
    """A JSON-ready copy of ``value`` with secret-looking keys and values replaced, in its canonical form.

    What this returns is hashed and stored, so it must come back from either database as it went in: no NUL
    (``storable``), and an integral float as the integer (PostgreSQL's jsonb gives ``1e16`` and ``-0.0`` back as
    ``10000000000000000`` and ``0``).
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
    if event.seq is None or event.prev_hash is None:
        raise ValueError(f"audit event id {event.pk} is not chained yet: it has no hash")
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
