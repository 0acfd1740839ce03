"""A call held for a person through the gateway: held after its guard, waited for, released once.

Holding: the call's guard is taken as for any guarded call; once every VPG lists its checkpoint,
the call is held (``rewind.approvals``) and the call's row records ``awaiting``. The agent's call
then waits on the event loop (no thread, no worker slot: it reads the held calls of its process
together, one statement a round, ``SharedReads``), streaming "waiting for a person: <page>", and
answers once the call is decided or ``REWIND_APPROVAL_WAIT_S`` has passed (or at once when the
request's ``_meta`` says ``zerto-rewind/wait: false``): then with the held call's id and page, for
``zerto_held_call_status``.

Releasing: whoever first claims an approved call (``held_call_claim``, a compare-and-swap) releases
it: the waiting call, in whichever process it runs, or the task queued by the approval (when no
call waits: ``wait: false``, or a call cut off). The release reads everything afresh and refuses,
saying which, when a stop covers the agent or the VM, the approval came too late, the tool is no
longer exported or its definition changed, the agent was deactivated, the stored arguments are not
the ones bound, the policy now denies the call (its version is recorded either way), or a
checkpoint is no longer listed on its ZVM. Otherwise the release is recorded (fail-closed), then
exactly the approved arguments go to the upstream, once, and the answer is kept (encrypted) for
the status tool.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from mcp_types import CallToolResult, TextContent

from rewind.approvals.announce import review_url
from rewind.approvals.models import HeldCall
from rewind.approvals.presenters import held_call_out, held_status_result
from rewind.approvals.services import (
    held_call_arguments,
    held_call_claim,
    held_call_expire,
    held_call_finish,
    held_call_release_refuse,
    held_call_released,
    held_call_result,
)
from rewind.checkpoints.holds import checkpoints_gone
from rewind.gateway.links import UpstreamSpec
from rewind.gateway.models import GatewayCall, UpstreamTool
from rewind.gateway.policy import DENY, HOLD, plan_call
from rewind.gateway.sending import ProgressRelay, send_held
from rewind.gateway.services import exported_tool, gateway_call_decide
from rewind.lib.errors import ApplicationError
from rewind.mcp.context import SharedReads, run_db, run_db_retried
from rewind.policy.selectors import stop_refusal

logger = logging.getLogger(__name__)
POLL_MIN_S, POLL_MAX_S = 0.1, 0.5
PROGRESS_EVERY_S = 15.0


@dataclass(frozen=True)
class HeldState:
    state: str
    expires_at: datetime


def held_call_states(ids: Collection[int]) -> dict[int, HeldState]:
    """The state of each held call, in one statement (a missing one reads as refused: it is gone)."""
    rows = HeldCall.objects.filter(pk__in=list(ids)).values_list("pk", "state", "expires_at")
    found = {pk: HeldState(state, expires) for pk, state, expires in rows}
    gone = HeldState(HeldCall.State.REFUSED, timezone.now())
    return {pk: found.get(pk, gone) for pk in ids}


# The waiting calls of a process read their held calls together: one statement a round for all.
_states: SharedReads[int, HeldState] = SharedReads(held_call_states, run=run_db_retried)


@dataclass(frozen=True)
class Checked:
    tool: UpstreamTool
    spec: UpstreamSpec
    arguments: dict[str, Any]
    policy_version: int


def release_check(held: HeldCall) -> Checked | str:
    """Everything a release depends on, read afresh; a sentence saying which refuses it, else what to send."""
    exported = exported_tool(held.exposed_name)
    version = exported.policy_version if exported is not None else None
    stopped = stop_refusal(agent_id=held.agent_id, agent_name=held.agent_name, vms=[held.vm, held.vm_identifier])
    if stopped is not None:
        return stopped
    if held.expires_at <= timezone.now():
        return f"its approval came, but it was not released before it expired at {held.expires_at:%H:%M:%S} UTC"
    if held.agent is not None and not held.agent.is_active:
        return f"agent {held.agent_name} was deactivated since the call was held"
    if exported is None or exported.tool.upstream_id != held.upstream_id:
        return f"{held.exposed_name} is no longer exported by the upstream it was held for"
    tool = exported.tool
    if tool.held or tool.approved_digest != held.tool_digest:
        return f"the definition of {held.tool} changed since the call was held; a person must approve it first"
    arguments = held_call_arguments(held)
    try:
        plan = plan_call(tool, arguments)
    except ApplicationError as exc:
        return f"the policy could not be applied again (version {version}): {exc.message}"
    if plan.action in (DENY, HOLD):
        return f"the policy changed (version {held.policy_version} → {version}) and now refuses it: {plan.reason}"
    gone = checkpoints_gone(held.checkpoints)
    if gone is not None:
        return gone
    return Checked(tool, exported.spec, arguments, int(version or 0))


def _refuse(held: HeldCall, refusal: str, version: int | None) -> None:
    with transaction.atomic():
        held_call_release_refuse(held=held, refusal=f"not forwarded: {refusal}", policy_version=version)
        call = GatewayCall.objects.filter(call_id=held.call_id).first()
        if call is not None:
            gateway_call_decide(
                call=call, decision=GatewayCall.Decision.REFUSED, reason=f"held call #{held.pk}: {refusal}"
            )


def _check(held: HeldCall) -> Checked | str:
    try:
        checked = release_check(held)
    except Exception:
        logger.exception("held call %s: the release's checks failed", held.pk)
        checked = "the release's checks could not be completed (see the service log)"
    if isinstance(checked, str):
        now = exported_tool(held.exposed_name)
        _refuse(held, checked, now.policy_version if now is not None else None)
        return checked
    with transaction.atomic():
        held_call_released(held=held, policy_version=checked.policy_version)
        call = GatewayCall.objects.get(call_id=held.call_id)
        gateway_call_decide(
            call=call,
            decision=GatewayCall.Decision.RELEASED,
            reason=f"held call #{held.pk} approved by {held.decided_by}",
            policy_version=checked.policy_version,
        )
    return checked


async def held_call_release(held_id: int, relay: Any = None, *, keep_link: bool = True) -> CallToolResult | None:
    """Release an approved held call if this caller claims it first: checked again, then forwarded once.

    Returns the upstream's answer when this caller forwarded it, else None (someone else claimed it,
    or the checks refused it: the held call says which)."""
    held = await run_db(held_call_claim, held_id=held_id)
    if held is None:
        return None
    checked = await run_db(_check, held)
    if isinstance(checked, str):
        return None
    call = await run_db(GatewayCall.objects.get, call_id=held.call_id)
    result, outcome = await send_held(
        checked.spec, checked.tool, call, checked.arguments, relay or ProgressRelay(None), keep_link=keep_link
    )
    await run_db(
        held_call_finish,
        held=held,
        outcome=outcome,
        result=result.model_dump(by_alias=True, mode="json", exclude_none=True),
    )
    return result


def held_call_release_now(held_id: int) -> str:
    """The task's body: release from sync code (a worker); what became of it, in words."""
    from rewind.gateway.listing import run_async

    result = run_async(lambda: held_call_release(held_id, keep_link=False))
    held = HeldCall.objects.get(pk=held_id)
    return f"{held.state}" + (f" ({held.outcome})" if result is not None else "")


# -- the agent's waiting call --------------------------------------------------------------------


def waiting_text(held: HeldCall) -> str:
    return f"waiting for a person: {review_url(held)} (held call #{held.pk})"


def _still_waiting(held: HeldCall) -> CallToolResult:
    view = held_call_out(held)
    text = (
        f"HELD FOR A PERSON: not forwarded yet. Held call #{held.pk} waits for a person at {view.page}. "
        f"Do not call the tool again: call zerto_held_call_status with id {held.pk} later; once approved, this "
        "service forwards exactly these arguments, once, and the status gives its answer."
    )
    # An error: the call did not run (and a tool with an output schema has no structured answer yet).
    return CallToolResult(
        content=[TextContent(type="text", text=f"{text}\n\n{view.model_dump_json(indent=2)}")], is_error=True
    )


def _answer(held_id: int) -> CallToolResult:
    """What the agent's call answers with once it stops waiting: the upstream's own answer when the call
    was forwarded (by whoever released it), else why not, or where it waits (both errors: nothing ran)."""
    held = HeldCall.objects.get(pk=held_id)
    if held.state in HeldCall.OPEN:
        return _still_waiting(held)
    kept = held_call_result(held) if held.state == HeldCall.State.FORWARDED else None
    if kept is not None:
        return CallToolResult.model_validate(kept)
    result = held_status_result(held)
    return result.model_copy(update={"structured_content": None, "is_error": True})


async def await_person(held: HeldCall, relay: Any, *, wait: bool) -> CallToolResult:
    """Wait on the event loop for a person's decision on ``held``, streaming where to decide; release it
    when approved (if no one else does first), and answer with what came of it, or, past the wait, with
    its id and page."""
    limit = float(settings.REWIND_APPROVAL_WAIT_S) if wait else 0.0
    started = time.monotonic()
    if relay is not None:
        relay.upstream_starts()  # the wait's progress counts on from where the guard's ended
    said, told = 0.0, -PROGRESS_EVERY_S
    words = waiting_text(held)
    while True:
        now = time.monotonic()
        if now - told >= PROGRESS_EVERY_S and relay is not None:
            said += 1.0
            await relay.report_progress(said, None, words)
            told = now
        current = await _states(held.pk)
        if current.state == HeldCall.State.APPROVED:
            released = await held_call_release(held.pk, relay)
            if released is not None:
                return released
            continue
        if current.state in HeldCall.FINAL:
            return await run_db(_answer, held.pk)
        if current.state in HeldCall.OPEN and current.expires_at <= timezone.now():
            await run_db(held_call_expire, held_id=held.pk)
            continue
        waited = time.monotonic() - started
        if waited >= limit:
            return await run_db(_answer, held.pk)
        pause = max(POLL_MIN_S, min(POLL_MAX_S, 0.02 * waited))
        await asyncio.sleep(min(pause, max(0.0, limit - waited)) or POLL_MIN_S)
