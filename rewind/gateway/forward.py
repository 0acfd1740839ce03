"""One call of an upstream tool through the gateway: check, decide, guard, forward, record.

Order, and what each step leaves behind:
1. a tool whose definition is held (new or changed, not yet approved by a person) is refused;
   the arguments are checked against the upstream's input schema; a mismatch is refused before
   any guard runs;
2. the call gets its row and call id; the decision (``policy.plan_call``) is recorded and
   audited before anything is forwarded, so a decision that cannot be written forwards nothing;
3. a call to guard first asks the upstream for a ping (``Link.ready``): an upstream that does not
   answer refuses the call before a checkpoint is spent on it. Then it waits for the guard with
   progress, exactly as ``zerto_guard_before_mutate`` does, and is forwarded only when the guard
   is ok; otherwise the guard's "DO NOT PROCEED" answer is returned and the upstream sees nothing;
4. the call goes to the upstream with its arguments; its result, error and progress come back
   as they are, with ``_meta`` naming the call id (what ``zerto_recover_file``'s
   ``before_call`` takes) and the guard. An upstream that could not be reached, or whose
   connection broke, ends the call ``upstream_failed``, saying whether it ran there: not at all
   (refused, never reached), or unknown (the connection broke after the call was sent).

What each call reads, afresh (a change decides the very next call, in every process; no cache
here expires by time): the tool, its upstream and the credentials version, in one statement
(``exported_tool``); a token verified under an older credentials version is looked up again, so
a revoked token or a deactivated agent is refused; then the catalog entry covering the tool and
its sighting, in one more (``catalog_view``). Only the upstream's decrypted settings are kept per
process, by their ``updated_at``, and checked validators, by their schema (the exposed names
``mcp_tools`` keeps for a few seconds only route a call here, where its tool is read afresh).
A call passed at once is one write transaction (its row, its sighting, its decision's audit
row); its outcome goes in with its ``mcp.tool.called`` row (``commit_with_record``).

An agent may pass its own change id in the request's ``_meta`` (``zerto-rewind/change_id``); a
retried call with the same change id reuses the guard. Otherwise each call gets ``gw-<call id>``.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jsonschema import SchemaError
from jsonschema.validators import validator_for
from mcp.server.mcpserver import Context
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, TextContent

from rewind.agents.mcp_auth import agent_token_current
from rewind.checkpoints.mcp_tools import guard_follow, guard_result
from rewind.checkpoints.presenters import GuardOut, guard_meta, guard_out
from rewind.checkpoints.services import guard_create
from rewind.errors import ApplicationError
from rewind.gateway.links import Link, UpstreamCallBroke, UpstreamSpec, UpstreamUnavailable
from rewind.gateway.models import GatewayCall, UpstreamTool
from rewind.gateway.naming import catalog_name
from rewind.gateway.policy import GUARD, HOLD, Plan, plan_call
from rewind.gateway.presenters import gateway_call_meta
from rewind.gateway.services import (
    exported_tool,
    gateway_call_decide,
    gateway_call_finish,
    gateway_call_open,
    gateway_call_record,
    upstream_link_record,
)
from rewind.gateway.sessions import link_for
from rewind.mcp import scopes
from rewind.mcp.context import (
    call_refers_to,
    commit_with_record,
    current_agent_id,
    current_agent_name,
    current_claims,
    current_scopes,
    run_db,
)
from rewind.requestid import current_request_id

logger = logging.getLogger(__name__)

META_CHANGE_ID = "zerto-rewind/change_id"
# The forwarded call's own bound, beyond the upstream's call timeout: the SDK's read timeout
# covers each round, this covers the whole call (a stream that trickles forever).
HARD_BOUND_GRACE_S = 5.0


class ProgressRelay:
    """Progress for one call: the guard's first, then the upstream's after it, always rising.

    The spec wants each notification's progress above the last; the upstream counts from its
    own zero, so its values are shifted past where the guard ended.
    """

    def __init__(self, ctx: Context | None) -> None:
        self._ctx = ctx
        self._last = 0.0
        self._base = 0.0
        # Without the agent's progress token nothing reaches it, so the upstream is not asked for
        # progress either (its notifications would be parsed only to be dropped). The SDK gives
        # ``_meta`` validated, the token under its Python name.
        self.wanted = _request_meta(ctx).get("progress_token") is not None

    async def report_progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        if self._ctx is None:
            return
        value = self._base + progress
        if value <= self._last:
            return
        self._last = value
        await self._ctx.report_progress(value, None if total is None else self._base + total, message)

    def upstream_starts(self) -> None:
        self._base = self._last

    async def from_upstream(self, progress: float, total: float | None, message: str | None) -> None:
        try:
            await self.report_progress(progress, total, message)
        except Exception:  # the agent went away: the call itself goes on
            logger.debug("could not relay progress", exc_info=True)


@functools.lru_cache(maxsize=512)
def _validator(schema_json: str) -> Any:
    """The checked validator of one schema (checking a schema costs more than using it), or None if invalid."""
    schema = json.loads(schema_json)
    cls = validator_for(schema)
    try:
        cls.check_schema(schema)
    except SchemaError:
        return None
    return cls(schema)


def schema_problem(tool: UpstreamTool, arguments: Mapping[str, Any]) -> str | None:
    """Why the arguments do not fit the upstream's input schema, in one sentence; None when they do."""
    validator = _validator(json.dumps(tool.input_schema or {"type": "object"}, sort_keys=True))
    if validator is None:
        return f"{tool.exposed_name}: the upstream's input schema is not valid JSON Schema, so no call is forwarded"
    errors = sorted(validator.iter_errors(dict(arguments)), key=lambda e: list(e.absolute_path))
    if not errors:
        return None
    said = []
    for error in errors[:5]:
        where = ".".join(str(p) for p in error.absolute_path)
        said.append(f"{where}: {error.message}" if where else error.message)
    return f"the arguments do not match {tool.exposed_name}'s input schema, so nothing was forwarded: " + "; ".join(
        s[:200] for s in said
    )


def held_refusal(tool: UpstreamTool) -> str:
    what = "is new" if not tool.approved_digest else "changed since a person approved it"
    return (
        f"not forwarded: {tool.exposed_name}'s definition (its description, schemas or annotations) {what}, and "
        "it is held until a person approves it (admin: Gateway, Upstream tools)"
    )


def _request_meta(ctx: Context | None) -> Mapping[str, Any]:
    """The ``_meta`` of the agent's request; empty without one."""
    if ctx is None:
        return {}
    try:
        meta = ctx.request_context.meta
    except (AttributeError, ValueError):
        return {}
    return meta if isinstance(meta, Mapping) else {}


def _meta_change_id(ctx: Context | None) -> str | None:
    value = _request_meta(ctx).get(META_CHANGE_ID)
    return str(value) if value is not None else None


def _error(text: str, call: GatewayCall, guard: dict[str, Any] | None = None) -> CallToolResult:
    return _with_meta(CallToolResult(content=[TextContent(type="text", text=text)], is_error=True), call, guard)


def _with_meta(result: CallToolResult, call: GatewayCall, guard: dict[str, Any] | None) -> CallToolResult:
    return result.model_copy(update={"meta": {**(result.meta or {}), **gateway_call_meta(call, guard)}})


@dataclass
class Prepared:
    """What the preparation step decided; ``answer`` set: answer with it, nothing is forwarded."""

    tool: UpstreamTool
    spec: UpstreamSpec
    call: GatewayCall
    plan: Plan
    answer: str | None = None
    change_id: str | None = None  # the agent's, for a call to guard


def _refuse(call: GatewayCall, plan: Plan, decision: str, reason: str) -> None:
    gateway_call_decide(
        call=call, decision=decision, reason=reason, catalog_entry=plan.catalog_entry, policy=plan.policy, vm=plan.vm
    )


def guard_start(ready: Prepared) -> Prepared | GuardOut:
    """Start the guard of a call to guard; a guard that refused at once ends the call (``Prepared.answer``)."""
    call, tool, plan = ready.call, ready.tool, ready.plan
    name = catalog_name(tool.upstream.name, tool.name)
    change = ready.change_id or f"gw-{call.call_id}"
    call_refers_to(change_id=change)
    try:
        outcome = guard_create(
            agent_name=call.agent_name,
            agent_id=call.agent_id,
            vm=plan.vm,
            action=f"{name} via the gateway",
            change_id=change,
            tool=name,
            request_id=call.request_id or None,
        )
    except ApplicationError as exc:
        _refuse(call, plan, GatewayCall.Decision.REFUSED, exc.message)
        ready.answer = f"DO NOT PROCEED: not forwarded, the guard refused: {exc.message}"
        return ready
    call_refers_to(guard=outcome.guard.pk if outcome.guard else None)
    return guard_out(outcome, tool=name)


def upstream_down_refuse(ready: Prepared, why: str) -> str:
    """A call to guard whose upstream does not answer: refused before any checkpoint; the answer to give."""
    reason = f"not forwarded and no checkpoint taken: {why}; the call did not run"
    _refuse(ready.call, ready.plan, GatewayCall.Decision.REFUSED, reason)
    gateway_call_finish(call=ready.call, outcome=GatewayCall.Outcome.UPSTREAM_FAILED, error=reason)
    return reason


def prepare(name: str, arguments: dict[str, Any], change_id: str | None) -> Prepared | None:
    """Steps 1-2 on one thread hop; None when ``name`` is not exported (any more).

    A call decided at once (passed, held, refused) is one transaction: its row, its sighting, its
    audit. A call to guard gets its row; its guard starts once its upstream answered (``guard_start``).
    """
    found = exported_tool(name)
    if found is None:
        return None
    tool, spec = found.tool, found.spec
    who: dict[str, Any] = {
        "agent_name": current_agent_name(),
        "agent_id": current_agent_id(),
        "tool": tool,
        "arguments": arguments,
        "request_id": current_request_id() or "",
    }
    refused = Plan("refuse", "")

    def decided(plan: Plan, decision: str, reason: str, answer: str | None, sighted: bool = False) -> Prepared:
        fields: dict[str, Any] = {
            "catalog_entry": plan.catalog_entry,
            "policy": plan.policy,
            "vm": plan.vm,
            "vm_arg": plan.vm_arg,
        }
        call = gateway_call_record(**who, decision=decision, reason=reason, sighted=sighted, **fields)
        return Prepared(tool, spec, call, plan, answer)

    if not agent_token_current(current_claims(), found.credentials_version):
        why = "this agent token was revoked or its agent deactivated since it was verified; nothing was forwarded"
        return decided(refused, GatewayCall.Decision.REFUSED, why, why)
    if tool.held:
        why = held_refusal(tool)
        return decided(refused, GatewayCall.Decision.REFUSED, why, why)
    problem = schema_problem(tool, arguments)
    if problem is not None:
        return decided(refused, GatewayCall.Decision.REFUSED, problem, problem)
    try:
        plan = plan_call(tool, arguments)
    except ApplicationError as exc:
        return decided(refused, GatewayCall.Decision.REFUSED, exc.message, f"not forwarded: {exc.message}")
    if plan.action == HOLD:
        return decided(plan, GatewayCall.Decision.HELD, plan.reason, f"not forwarded: {plan.reason}")
    if plan.action != GUARD:
        return decided(plan, GatewayCall.Decision.PASSED, plan.reason, None, sighted=not plan.catalog_entry)
    if scopes.GUARD not in current_scopes():
        why = str(scopes.InsufficientScopeError(scopes.GUARD, f"this call ({plan.reason}) is guarded, and a guard"))
        return decided(plan, GatewayCall.Decision.REFUSED, why, f"DO NOT PROCEED: not forwarded: {why}")
    call = gateway_call_open(**who, suggested_vm_arg="" if plan.catalog_entry else plan.vm_arg)
    return Prepared(tool, spec, call, plan, change_id=change_id)


def _guard_decided(ready: Prepared, out: GuardOut) -> None:
    plan = ready.plan
    fields = {
        "catalog_entry": plan.catalog_entry,
        "policy": plan.policy,
        "vm": plan.vm,
        "vm_arg": plan.vm_arg,
        "guard_id": out.id,
        "change_id": out.change_id or "",
    }
    if out.ok:
        gateway_call_decide(call=ready.call, decision=GatewayCall.Decision.GUARDED, reason=plan.reason, **fields)
        return
    reason = f"guard not ok: {out.must_not_proceed or 'the guard ended ' + out.status}"
    gateway_call_decide(call=ready.call, decision=GatewayCall.Decision.REFUSED, reason=reason, **fields)


async def forward_call(name: str, arguments: dict[str, Any], ctx: Context | None) -> CallToolResult | None:
    """The whole gateway path for one call; None when ``name`` is not an exported tool (any more).

    Always answers with a result otherwise (errors as ``isError``).
    """
    ready = await run_db(prepare, name, arguments, _meta_change_id(ctx))
    if ready is None:
        return None
    if ready.answer is not None:
        return _error(ready.answer, ready.call)
    link = link_for(ready.spec)
    relay = ProgressRelay(ctx)
    guard: dict[str, Any] | None = None
    if ready.plan.action == GUARD:
        try:
            await link.ready()
        except UpstreamUnavailable as exc:
            await _note_link(link)
            return _error(await run_db(upstream_down_refuse, ready, exc.message), ready.call)
        started = await run_db(guard_start, ready)
        if isinstance(started, Prepared):
            return _error(started.answer or "not forwarded", ready.call)
        out = await guard_follow(started, relay)
        guard = guard_meta(out)
        await run_db(_guard_decided, ready, out)
        if not out.ok:
            return _with_meta(guard_result(out), ready.call, guard)
    relay.upstream_starts()
    result = await _send(link, ready.tool, ready.call, arguments, relay)
    return _with_meta(result, ready.call, guard)


async def _send(
    link: Link, tool: UpstreamTool, call: GatewayCall, arguments: dict[str, Any], relay: ProgressRelay
) -> CallToolResult:
    spec = link.spec
    try:
        async with asyncio.timeout(spec.call_timeout_s + HARD_BOUND_GRACE_S):
            result = await link.call_tool(tool.name, arguments, relay.from_upstream if relay.wanted else None)
    except UpstreamUnavailable as exc:
        return await _failed(link, call, f"not forwarded: {exc.message}; the call did not run")
    except UpstreamCallBroke as exc:
        return await _failed(link, call, f"{exc.message}; the call may or may not have run there")
    except TimeoutError:
        link.discard()
        why = f"upstream {spec.name} did not finish {tool.name} within {spec.call_timeout_s:g} s"
        return await _failed(link, call, f"{why}; the call may or may not have run there")
    except MCPError as exc:
        # The upstream answered with a JSON-RPC error: the session itself is fine.
        text = f"upstream {spec.name} answered the call of {tool.name} with an error: {str(exc)[:300]}"
        return await _failed(link, call, text, outcome=GatewayCall.Outcome.ERROR)
    await _note_link(link)
    outcome = GatewayCall.Outcome.ERROR if result.is_error else GatewayCall.Outcome.OK
    # Committed with the call's mcp.tool.called row, which records the same outcome.
    await commit_with_record(functools.partial(gateway_call_finish, call=call, outcome=outcome))
    return result


async def _note_link(link: Link) -> None:
    """Record a change of the link's health in this process (it went down, or answers again), once."""
    if link.changes == link.recorded_changes:
        return
    link.recorded_changes = link.changes
    await run_db(upstream_link_record, upstream_id=link.spec.pk, down_since=link.down_since, error=link.last_error)


async def _failed(
    link: Link, call: GatewayCall, text: str, *, outcome: str = GatewayCall.Outcome.UPSTREAM_FAILED
) -> CallToolResult:
    await _note_link(link)
    await commit_with_record(functools.partial(gateway_call_finish, call=call, outcome=outcome, error=text))
    return _error(text, call)
