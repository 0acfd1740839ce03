"""Proving the chain, and keeping the proof: each verification is itself an audit event.

The event goes into the chain it checked, after its last event, so the next verification also
proves the earlier ones were recorded as they were; a broken chain is recorded the same way
(``audit.chain.broken``), naming the first broken event.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from django.db import transaction

from rewind.actors import Actor
from rewind.audit import audit_record, verify_chain
from rewind.audit.actions import AuditLogAction
from rewind.audit.models import AuditEvent


@dataclass(frozen=True)
class ChainVerification:
    ok: bool
    events: int  # intact events before the first break (all of them when ok)
    broken_at: int | None
    reason: str
    event: AuditEvent | None  # the event recording this verification; None when it could not be written
    record_error: str = ""


def audit_chain_verify(*, actor: Actor, request_id: str | None = None) -> ChainVerification:
    """Walk the whole chain, then append what was found (``audit.chain.verified`` or ``.broken``).

    The walk holds no lock; the record takes the head lock like any append. When the record
    cannot be written (the head row is gone, the database refuses), the verdict is still
    returned, with ``record_error`` saying why it is not kept.
    """
    started = time.monotonic()
    checked, problem = verify_chain()
    data: dict[str, object] = {"events": checked, "duration_ms": round((time.monotonic() - started) * 1000)}
    if problem is not None:
        data.update(broken_at=problem.seq, reason=problem.reason)
    action = AuditLogAction.CHAIN_VERIFIED if problem is None else AuditLogAction.CHAIN_BROKEN
    try:
        # Its own savepoint: the event is the only change here, and a failed write must not
        # leave a caller's transaction unusable.
        with transaction.atomic():
            event: AuditEvent | None = audit_record(actor=actor, action=action, data=data, request_id=request_id)
        error = ""
    except Exception as exc:  # any failure to write: the verdict itself must still reach the caller
        event, error = None, f"{type(exc).__name__}: {exc}"
    return ChainVerification(
        ok=problem is None,
        events=checked,
        broken_at=problem.seq if problem else None,
        reason=problem.reason if problem else "",
        event=event,
        record_error=error,
    )
