"""Proving the chain, and keeping the proof: each verification is itself an audit event.

The verdict goes into the chain it checked (so the next verification proves the earlier ones too), and an anchor
is published at once after it. The anchor publisher records a break it finds the same way, once, so the
dashboard, ``/metrics`` and the notification channels hear of it within an anchor interval.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.db import transaction

from rewind.audit import audit_record
from rewind.audit.actions import AuditLogAction
from rewind.audit.anchors import ChainCheck, Publication, audit_anchor_publish, chain_check
from rewind.audit.models import AuditEvent
from rewind.audit.selectors import audit_last_verification
from rewind.lib.actors import Actor

logger = logging.getLogger(__name__)
ANCHOR_PUBLISHER = Actor.system("audit anchor publisher")


@dataclass(frozen=True)
class ChainVerification:
    check: ChainCheck
    event: AuditEvent | None  # the event recording this verification; None when it could not be written
    record_error: str = ""
    anchor_note: str = ""  # what the anchor published after it did, in words

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
    """Walk the whole chain and hold it against the anchors (every anchor of ``anchor_files`` with
    ``every_anchor``), append the verdict, then publish an anchor.

    The walk holds no lock. When the verdict cannot be recorded (the head row is gone, the database refuses) it
    is still returned, with ``record_error`` saying why; so is an anchor that could not be published
    (``anchor_note``).
    """
    started = time.monotonic()
    check = chain_check(every_anchor=every_anchor, anchor_files=anchor_files)
    event, error = _record(check, actor=actor, request_id=request_id, duration_s=time.monotonic() - started)
    try:
        note = audit_anchor_publish().note
    except Exception as exc:  # a file or a database that fails: the verdict must still reach the caller
        note = f"no anchor published: {type(exc).__name__}: {exc}"
    return ChainVerification(check=check, event=event, record_error=error, anchor_note=note)


def audit_anchor_publish_reported(*, actor: Actor = ANCHOR_PUBLISHER) -> Publication:
    """Publish an anchor (``audit_anchor_publish``) and record a break found on the way, unless the
    newest recorded verification already names it. What the beat runs every anchor interval."""
    publication = audit_anchor_publish()
    found = publication.found
    if found is not None and not _recorded_already(found):
        _record(found, actor=actor, request_id=None, duration_s=0.0)
    return publication


def audit_anchor_publish_at_exit(process: str) -> None:
    """Publish an anchor as ``process`` stops, so its last events do not wait for the beat.
    Never raises: a process must be able to stop with its database or its disk gone."""
    try:
        logger.info("audit anchor as %s stops: %s", process, audit_anchor_publish_reported().note)
    except Exception:
        logger.warning("no audit anchor published as %s stops", process, exc_info=True)


def _recorded_already(found: ChainCheck) -> bool:
    last = audit_last_verification()
    data: Any = last.data if last is not None else None
    return (
        last is not None
        and last.action == AuditLogAction.CHAIN_BROKEN
        and isinstance(data, dict)
        and (data.get("broken_at"), data.get("reason")) == (found.broken_at, found.reason)
    )


def _record(
    check: ChainCheck, *, actor: Actor, request_id: str | None, duration_s: float
) -> tuple[AuditEvent | None, str]:
    """Append the verdict of ``check``; (the event, or None and why it could not be written)."""
    data: dict[str, object] = {
        "events": check.events,
        "anchors": check.anchors,
        "duration_ms": round(duration_s * 1000),
    }
    if not check.ok:
        data.update(broken_at=check.broken_at, reason=check.reason)
    action = AuditLogAction.CHAIN_VERIFIED if check.ok else AuditLogAction.CHAIN_BROKEN
    try:
        # Its own savepoint: the event is the only change here, and a failed write must not
        # leave a caller's transaction unusable.
        with transaction.atomic():
            event = audit_record(actor=actor, action=action, data=data, request_id=request_id)
        if event.seq is None:
            event.refresh_from_db()  # chained after commit, when another chainer held the lock
    except Exception as exc:  # any failure to write: the verdict itself must still reach the caller
        return None, f"{type(exc).__name__}: {exc}"
    return event, ""
