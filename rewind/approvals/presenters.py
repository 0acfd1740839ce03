"""What a held call looks like to the outside: the agent (MCP), the REST API and the pages read this."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from mcp_types import CallToolResult, TextContent
from pydantic import Field

from rewind.approvals.announce import review_url
from rewind.approvals.models import HeldCall
from rewind.approvals.services import held_call_result
from rewind.lib.rest.outputs import OutputModel, choices


class HeldCheckpointOut(OutputModel):
    vpg: str
    checkpoint_identifier: str | None = None
    checkpoint_time: str | None = None
    site: str | None = None


class HeldCallOut(OutputModel):
    rest_name = "HeldCall"

    id: int = Field(description="The held call's id, for zerto_held_call_status")
    state: Annotated[
        str,
        Field(description="guarding, pending, approved, denied, expired, releasing, forwarded or refused"),
        choices(HeldCall.State.choices),
    ]
    mode: Annotated[str, Field(description="gateway: forwarded once approved; guard: you make the call once approved")]
    page: str = Field(description="The page where a person reads the call and approves or denies it")
    tool: str
    agent: str
    vm: str | None = None
    arguments: Any = Field(description="As the person sees them: secret-looking values masked")
    arguments_digest: str = Field(description="SHA-256 of the arguments' RFC 8785 form: what an approval binds")
    checkpoints: list[HeldCheckpointOut] = Field(default_factory=list)
    reason: str = Field(description="Why a person must approve it")
    policy_version: int
    approvals: int
    approvals_required: int
    expires_at: datetime | None = None
    decided_by: str | None = None
    decided_at: datetime | None = None
    refusal: str | None = Field(default=None, description="Why it was not forwarded, or the denial's note")
    outcome: str | None = Field(default=None, description="Forwarded: ok, error, upstream_failed or unknown")
    call_id: str | None = None
    guard_id: int | None = None
    created_at: datetime | None = None
    next: str = Field(description="What to do now")


def _next(held: HeldCall) -> str:
    state, State = held.state, HeldCall.State
    if state == State.GUARDING:
        return "Its checkpoints are being taken; then it waits for a person. Do not make the change."
    if state == State.PENDING:
        return (
            f"Waiting for a person: {review_url(held)}. Do not make the change; call zerto_held_call_status "
            f"with id {held.pk} later (tell the user the page, if they can approve)."
        )
    if state == State.APPROVED and held.mode == HeldCall.Mode.GUARD:
        return (
            f"Approved by {held.decided_by}: make the call to {held.tool} now with exactly the arguments guarded "
            "(the same digest); any other arguments need a new approval."
        )
    if state in (State.APPROVED, State.RELEASING):
        return "Approved: the service forwards exactly the approved call, once. Call zerto_held_call_status again."
    if state == State.FORWARDED:
        return "Forwarded once, with exactly the approved arguments; its answer is below. Do not call it again."
    return "DO NOT PROCEED: " + (held.refusal or state) + ". Report this to the user; do not retry in a loop."


def held_call_out(held: HeldCall) -> HeldCallOut:
    return HeldCallOut(
        id=held.pk,
        state=held.state,
        mode=held.mode,
        page=review_url(held),
        tool=held.tool,
        agent=held.agent_name,
        vm=held.vm or None,
        arguments=held.arguments_shown,
        arguments_digest=held.arguments_digest,
        checkpoints=[
            HeldCheckpointOut(
                vpg=str(c.get("vpg") or ""),
                checkpoint_identifier=c.get("checkpoint_identifier"),
                checkpoint_time=c.get("checkpoint_time"),
                site=c.get("site"),
            )
            for c in held.checkpoints
        ],
        reason=held.reason,
        policy_version=held.policy_version,
        approvals=held.approvals.count(),
        approvals_required=held.approvals_required,
        expires_at=held.expires_at,
        decided_by=held.decided_by or None,
        decided_at=held.decided_at,
        refusal=held.refusal or None,
        outcome=held.outcome or None,
        call_id=held.call_id or None,
        guard_id=held.guard_id,
        created_at=held.created_at,
        next=_next(held),
    )


def held_status_result(held: HeldCall) -> CallToolResult:
    """The held call as its status answers it: the call itself in ``structuredContent``; once forwarded,
    the upstream's own answer as the content (an error if it was one); refused, denied or expired: an error."""
    view = held_call_out(held)
    structured = view.model_dump(mode="json")
    kept = held_call_result(held) if held.state == HeldCall.State.FORWARDED else None
    if kept is not None:
        upstream = CallToolResult.model_validate(kept)
        head = TextContent(type="text", text=f"Held call #{held.pk}: {view.next}")
        return CallToolResult(
            content=[head, *upstream.content], structured_content=structured, is_error=upstream.is_error
        )
    failed = held.state in (HeldCall.State.DENIED, HeldCall.State.EXPIRED, HeldCall.State.REFUSED)
    return CallToolResult(
        content=[
            TextContent(type="text", text=f"Held call #{held.pk}: {view.next}\n\n{view.model_dump_json(indent=2)}")
        ],
        structured_content=structured,
        is_error=failed,
    )
