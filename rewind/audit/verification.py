"""Proving the chain, and keeping the proof: each verification is itself an audit event.

The event goes into the chain it checked, after its last event, so the next verification also
proves the earlier ones were recorded as they were; a broken chain is recorded the same way
(``audit.chain.broken``), naming the first broken event or the first anchor the chain does not
match (``rewind.audit.anchors``: a chain cut at its end or emptied still links, the anchors
published outside the database do not).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from django.db import transaction

from rewind.actors import Actor
from rewind.audit import audit_record
from rewind.audit.actions import AuditLogAction
from rewind.audit.anchors import ChainCheck, chain_check
from rewind.audit.models import AuditEvent


@dataclass(frozen=True)
class ChainVerification:
    check: ChainCheck
    event: AuditEvent | None  # the event recording this verification; None when it could not be written
    record_error: str = ""

    @property
    def ok(self) -> bool:
        return self.check.ok

    @property
    def events(self) -> int:  # intact events before the first break (all of them when ok)
        return self.check.events

    @property
    def broken_at(self) -> int | None:
        return self.check.broken_at

    @property
    def reason(self) -> str:
        return self.check.reason


def audit_chain_verify(
    *, actor: Actor, request_id: str | None = None, every_anchor: bool = False, anchor_files: Sequence[Path] = ()
) -> ChainVerification:
    """Walk the whole chain and hold it against the anchors, then append what was found
    (``audit.chain.verified`` or ``.broken``).

    ``every_anchor``: every anchor of ``anchor_files`` (default the configured file), not only
    the newest. The walk holds no lock; the record takes the head lock like any append. When the
    record cannot be written (the head row is gone, the database refuses), the verdict is still
    returned, with ``record_error`` saying why it is not kept.
    """
    started = time.monotonic()
    check = chain_check(every_anchor=every_anchor, anchor_files=anchor_files)
    data: dict[str, object] = {
        "events": check.events,
        "anchors": check.anchors,
        "duration_ms": round((time.monotonic() - started) * 1000),
    }
    if not check.ok:
        data.update(broken_at=check.broken_at, reason=check.reason)
    action = AuditLogAction.CHAIN_VERIFIED if check.ok else AuditLogAction.CHAIN_BROKEN
    try:
        # Its own savepoint: the event is the only change here, and a failed write must not
        # leave a caller's transaction unusable.
        with transaction.atomic():
            event: AuditEvent | None = audit_record(actor=actor, action=action, data=data, request_id=request_id)
        if event is not None and event.seq is None:
            event.refresh_from_db()  # chained after commit, when another chainer held the lock
        error = ""
    except Exception as exc:  # any failure to write: the verdict itself must still reach the caller
        event, error = None, f"{type(exc).__name__}: {exc}"
    return ChainVerification(check=check, event=event, record_error=error)
