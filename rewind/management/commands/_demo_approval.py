"""``manage.py demo --approval``: a change held for a person, bound to the exact call, and a stop.

The catalog entry of the guest shell's ``exec`` says ``approve``. The scripted agent calls it through
the gateway: its VM is guarded, then the call is held and the agent's call waits, streaming "waiting
for a person: <page>". A person approves it on that page (``--auto-approve``: the demo approver,
through the service the page calls), and exactly that call is forwarded, once. The same call with one
argument changed is a new request, not the approved one: the demo denies it and nothing runs. Then
the demo approver stops every guarded change, and the agent's next call is refused saying who and
why; the stop is lifted again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from django.core.management.base import CommandError
from mcp_types import RequestParamsMeta

from catalog.models import MutatingTool
from catalog.services import mutating_tool_update
from rewind.approvals.models import HeldCall
from rewind.approvals.services import held_call_approve, held_call_deny
from rewind.audit import Actor
from rewind.gateway.models import GatewayCall
from rewind.management.commands._demo_agent import ScriptedAgent
from rewind.management.commands._demo_gateway import EXEC, UPSTREAM
from rewind.policy.models import Decision
from rewind.policy.services import stop_engage, stop_lift

POLL_S = 0.2


def entry_approve(approver: Any) -> str:
    """The guest shell's exec held for a person (a person's change of the catalog: the demo approver's)."""
    entry = MutatingTool.objects.get(pattern=f"{UPSTREAM}/exec")
    if entry.decision != Decision.APPROVE:
        mutating_tool_update(actor=Actor.user(approver.get_username()), tool=entry, decision=Decision.APPROVE)
    return f"the catalog entry {UPSTREAM}/exec says approve: a person approves each call after its checkpoint"


def _held_since(agent_name: str, after: int, timeout_s: float) -> HeldCall:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        held = HeldCall.objects.filter(agent_name=agent_name, pk__gt=after, state=HeldCall.State.PENDING).first()
        if held is not None:
            return held
        time.sleep(POLL_S)
    raise CommandError(f"no call of agent {agent_name} was held within {timeout_s:g} s")


def approve_and_forward(
    agent: ScriptedAgent,
    agent_name: str,
    arguments: dict[str, Any],
    approver: Any,
    auto: bool,
    say: Callable[[str], None],
    timeout_s: float,
) -> tuple[HeldCall, Any]:
    """The agent's call waits (its own thread) while a person approves it; its answer and the held call."""
    after = HeldCall.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
    answer: dict[str, Any] = {}

    def call() -> None:
        try:
            answer["result"] = agent.call_result(EXEC, arguments, on_message=lambda m: say(f"   … {m}"), errors=True)
        except Exception as exc:  # reported by the main thread
            answer["error"] = exc

    waiting = threading.Thread(target=call, name="demo-agent-call")
    waiting.start()
    held = _held_since(agent_name, after, timeout_s)
    say(
        f"   held call #{held.pk}: digest {held.arguments_digest[:16]}…, checkpoints "
        + ", ".join(str(c["checkpoint_identifier"]) for c in held.checkpoints)
    )
    if auto:
        held_call_approve(held_id=held.pk, user=approver, seen_digest=held.arguments_digest)
        say(f"   {approver.get_username()} approves it on its page (--auto-approve)")
    waiting.join(timeout_s)
    if "error" in answer:
        raise CommandError(str(answer["error"]))
    if "result" not in answer:
        raise CommandError(f"the agent's call did not answer within {timeout_s:g} s")
    held.refresh_from_db()
    return held, answer["result"]


def changed_call_refused(agent: ScriptedAgent, arguments: dict[str, Any], approver: Any) -> HeldCall:
    """One argument changed: a new request (not the approved one), answered at once; denied, nothing runs."""
    at_once: RequestParamsMeta = {"zerto-rewind/wait": False}  # type: ignore[typeddict-unknown-key]
    result = agent.call_result(EXEC, arguments, meta=at_once, errors=True)
    held = HeldCall.objects.get(pk=(result.meta or {})["zerto-rewind/held"]["id"])
    held_call_deny(held_id=held.pk, user=approver, note="not the command that was approved")
    held.refresh_from_db()
    return held


def stop_refuses_the_next_call(agent: ScriptedAgent, arguments: dict[str, Any], approver: Any) -> str:
    """Every guarded change stopped by the demo approver; the agent's next call refused; the stop lifted."""
    stop = stop_engage(actor=Actor.user(approver.get_username()), scope="everywhere", reason="the demo's change freeze")
    try:
        result = agent.call_result(EXEC, arguments, errors=True)
    finally:
        stop_lift(actor=Actor.user(approver.get_username()), stop=stop, note="the demo is over")
    text = " ".join(getattr(part, "text", "") for part in result.content)
    if not result.is_error or "STOPPED" not in text:
        raise CommandError(f"the stop did not refuse the call: {text}")
    return text


def call_row(held: HeldCall) -> GatewayCall:
    return GatewayCall.objects.get(call_id=held.call_id)
