"""What the audit log looks like over REST: its events as they were chained, and the chain's check."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field

from rewind.audit.anchors import ChainCheck
from rewind.audit.models import AuditEvent
from rewind.lib.rest.outputs import OutputModel, optional


class AuditEventOut(OutputModel):
    presents = AuditEvent

    seq: int | None
    time: datetime
    actor_type: str
    actor: str
    action: str
    target_type: str
    target_id: str
    target_repr: str
    data: Any
    request_id: str
    prev_hash: str | None
    hash: str | None


class AuditVerificationOut(OutputModel):
    ok: bool
    events: int = Field(description="How many events were checked.")
    anchors: int = Field(description="How many anchors published outside the database the chain matches (the newest).")
    broken_at: int | None = optional(description="The first event that breaks the chain.")
    reason: str | None = optional()


def audit_verification_out(check: ChainCheck) -> AuditVerificationOut:
    out = AuditVerificationOut(ok=check.ok, events=check.events, anchors=check.anchors)
    if not check.ok:
        out.broken_at, out.reason = check.broken_at, check.reason
    return out
