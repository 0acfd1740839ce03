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

A held call, in the 2026-07-28 era, to a client that declares URL elicitation (and waits): the call
answers ``input_required`` with one URL elicitation of the held call's review page and a request state
naming the held call and its arguments' digest (the SDK seals it, bound to the tool, the arguments and
the agent). The client's retry continues that held call, and no other: accepted, it waits for the
person as a waiting call does; declined or cancelled, it answers at once with the held call's id and page.
"""

from __future__ import annotations

import functools
import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from jsonschema import SchemaError
from jsonschema.validators import validator_for
from mcp.server.mcpserver import Context
from mcp_types import (
    CallToolResult,
    ElicitRequest,
    ElicitRequestURLParams,
    ElicitResult,
    InputRequiredResult,
    TextContent,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from rewind.agents.mcp_auth import agent_token_current
from rewind.approvals.announce import review_url
from rewind.approvals.jcs import digest
from rewind.approvals.models import HeldCall
from rewind.approvals.services import HoldRequest, held_call_open
from rewind.checkpoints.holds import hold_after_guard
from rewind.checkpoints.mcp_tools import guard_follow, guard_result
from rewind.checkpoints.models import ChangeGuard
from rewind.checkpoints.presenters import GuardOut, guard_meta, guard_out
from rewind.checkpoints.services import guard_create
from rewind.gateway.links import UpstreamSpec, UpstreamUnavailable
from rewind.gateway.models import GatewayCall, UpstreamTool
from rewind.gateway.naming import catalog_name
from rewind.gateway.policy import ASK, DENY, GUARD, HOLD, Plan, plan_call
from rewind.gateway.presenters import gateway_call_meta
from rewind.gateway.release import await_person
from rewind.gateway.sending import ProgressRelay, call_error, note_link, request_meta, send, with_meta
from rewind.gateway.services import (
    exported_tool,
    gateway_call_decide,
    gateway_call_finish,
    gateway_call_open,
    gateway_call_record,
)
from rewind.gateway.sessions import link_for
from rewind.lib.errors import ApplicationError
from rewind.lib.requestid import current_request_id
from rewind.mcp import scopes
from rewind.mcp.context import (
    call_refers_to,
    current_agent_id,
    current_agent_name,
    current_claims,
    current_scopes,
    run_db,
)
from rewind.policy.models import Decision
from rewind.policy.selectors import stop_refusal

logger = logging.getLogger(__name__)

META_CHANGE_ID = "zerto-rewind/change_id"
META_WAIT = "zerto-rewind/wait"
META_HELD = "zerto-rewind/held"
# The request state of a held call answered by URL elicitation: the held call and its arguments' digest.
HELD_STATE = re.compile(r"zerto-rewind/held-call:(?P<id>[0-9]{1,18}):(?P<digest>[0-9a-f]{64})")


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


def _meta_change_id(ctx: Context | None) -> str | None:
    value = request_meta(ctx).get(META_CHANGE_ID)
    return str(value) if value is not None else None


@dataclass
class Prepared:
    """What the preparation step decided; ``answer`` set: answer with it, nothing is forwarded."""

    tool: UpstreamTool
    spec: UpstreamSpec
    call: GatewayCall
    plan: Plan
    answer: str | None = None
    change_id: str | None = None  # the agent's, for a call to guard
    arguments: dict[str, Any] | None = None  # for a call that may be held for a person


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
            decision=plan.decision,
            decision_reason=_why_a_person(plan),
        )
    except ApplicationError as exc:
        _refuse(call, plan, GatewayCall.Decision.REFUSED, exc.message)
        ready.answer = f"DO NOT PROCEED: not forwarded, the guard refused: {exc.message}"
        return ready
    call_refers_to(guard=outcome.guard.pk if outcome.guard else None)
    return guard_out(outcome, tool=name)


def _why_a_person(plan: Plan) -> str:
    if plan.decision != Decision.APPROVE:
        return plan.reason
    if plan.catalog_entry:
        return f"the catalog entry {plan.catalog_entry} says approve"
    return f"its policy is approve ({plan.reason})"


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
        "policy_version": found.policy_version,
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
    if plan.action == DENY:
        return decided(plan, GatewayCall.Decision.REFUSED, plan.reason, f"DO NOT PROCEED: not forwarded: {plan.reason}")
    if found.stops_in_force and not plan.read_only:
        stopped = stop_refusal(agent_id=who["agent_id"], agent_name=who["agent_name"], vms=[plan.vm] if plan.vm else [])
        if stopped is not None:
            return decided(plan, GatewayCall.Decision.REFUSED, stopped, stopped)
    if plan.action == HOLD:
        return decided(plan, GatewayCall.Decision.HELD, plan.reason, f"not forwarded: {plan.reason}")
    if plan.action not in (GUARD, ASK):
        return decided(plan, GatewayCall.Decision.PASSED, plan.reason, None, sighted=not plan.catalog_entry)
    if scopes.GUARD not in current_scopes():
        why = str(scopes.InsufficientScopeError(scopes.GUARD, f"this call ({plan.reason}) is guarded, and a guard"))
        return decided(plan, GatewayCall.Decision.REFUSED, why, f"DO NOT PROCEED: not forwarded: {why}")
    call = gateway_call_open(**who, suggested_vm_arg="" if plan.catalog_entry else plan.vm_arg)
    return Prepared(tool, spec, call, plan, change_id=change_id, arguments=arguments)


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
        fields["policy_version"] = out.policy_version or ready.call.policy_version
        gateway_call_decide(call=ready.call, decision=GatewayCall.Decision.GUARDED, reason=plan.reason, **fields)
        return
    reason = f"guard not ok: {out.must_not_proceed or 'the guard ended ' + out.status}"
    gateway_call_decide(call=ready.call, decision=GatewayCall.Decision.REFUSED, reason=reason, **fields)


async def forward_call(
    name: str, arguments: dict[str, Any], ctx: Context | None
) -> CallToolResult | InputRequiredResult | None:
    """The whole gateway path for one call; None when ``name`` is not an exported tool (any more).

    Always answers with a result otherwise (errors as ``isError``); ``input_required`` when a held call
    asks the client to open its review page (URL elicitation), whose retry continues that held call.
    """
    state = ctx.request_state if ctx is not None else None
    if state is not None:
        return await continue_held(name, arguments, state, ctx)
    ready = await run_db(prepare, name, arguments, _meta_change_id(ctx))
    if ready is None:
        return None
    if ready.answer is not None:
        return call_error(ready.answer, ready.call)
    link = link_for(ready.spec)
    relay = ProgressRelay(ctx)
    guard: dict[str, Any] | None = None
    if ready.plan.action == GUARD:
        try:
            await link.ready()
        except UpstreamUnavailable as exc:
            await note_link(link)
            return call_error(await run_db(upstream_down_refuse, ready, exc.message), ready.call)
        started = await run_db(guard_start, ready)
        if isinstance(started, Prepared):
            return call_error(started.answer or "not forwarded", ready.call)
        out = await guard_follow(started, relay)
        guard = guard_meta(out)
        if out.ok and out.decision == Decision.APPROVE:
            return await _held(ready, await run_db(hold_call, ready, out), relay, ctx, guard)
        await run_db(_guard_decided, ready, out)
        if not out.ok:
            return with_meta(guard_result(out), ready.call, guard)
    elif ready.plan.action == ASK:
        return await _held(ready, await run_db(hold_call, ready, None), relay, ctx, None)
    relay.upstream_starts()
    result = await send(link, ready.tool, ready.call, arguments, relay)
    return with_meta(result, ready.call, guard)


def hold_call(ready: Prepared, out: GuardOut | None) -> HeldCall | str:
    """Hold the call for a person (after its guard, when it has one); its row says ``awaiting``.

    The agent's own change id and the same arguments find the call held already (a retry): this call's
    row is then refused (it forwards nothing itself) and the retry follows that held call. Returns the
    held call, or the refusal to answer with when the arguments cannot be bound."""
    call, plan, tool = ready.call, ready.plan, ready.tool
    name = catalog_name(tool.upstream.name, tool.name)
    arguments = ready.arguments or {}
    fields: dict[str, Any] = {
        "catalog_entry": plan.catalog_entry,
        "policy": plan.policy,
        "vm": plan.vm,
        "vm_arg": plan.vm_arg,
    }
    if out is not None:
        fields.update(guard_id=out.id, change_id=out.change_id or "")
    try:
        with transaction.atomic():
            if out is not None and out.id is not None:
                held = hold_after_guard(
                    guard=ChangeGuard.objects.get(pk=out.id),
                    mode=HeldCall.Mode.GATEWAY,
                    tool=name,
                    arguments=arguments,
                    agent_id=call.agent_id,
                    agent_name=call.agent_name,
                    request_id=call.request_id,
                    upstream_id=tool.upstream_id,
                    exposed_name=tool.exposed_name,
                    tool_digest=tool.approved_digest,
                    call_id=call.call_id,
                )
            else:
                held = held_call_open(
                    HoldRequest(
                        mode=HeldCall.Mode.GATEWAY,
                        agent_id=call.agent_id,
                        agent_name=call.agent_name,
                        tool=name,
                        arguments=arguments,
                        reason=plan.reason,
                        policy_version=call.policy_version or 0,
                        request_id=call.request_id,
                        upstream_id=tool.upstream_id,
                        exposed_name=tool.exposed_name,
                        tool_digest=tool.approved_digest,
                        call_id=call.call_id,
                    )
                )
            if held.call_id == call.call_id:
                why = f"held for a person: held call #{held.pk} ({held.reason})"
                gateway_call_decide(call=call, decision=GatewayCall.Decision.AWAITING, reason=why, **fields)
            else:
                why = f"the same call is held already: held call #{held.pk} (call {held.call_id}); this one forwards nothing"
                gateway_call_decide(call=call, decision=GatewayCall.Decision.REFUSED, reason=why, **fields)
    except ApplicationError as exc:
        _refuse(call, plan, GatewayCall.Decision.REFUSED, exc.message)
        return f"DO NOT PROCEED: not forwarded: {exc.message}"
    call_refers_to(held=held.pk)
    return held


def _meta_wait(ctx: Context | None) -> bool:
    """``zerto-rewind/wait: false`` in the request's ``_meta``: answer a held call at once."""
    return request_meta(ctx).get(META_WAIT) is not False


async def _held(
    ready: Prepared, held: HeldCall | str, relay: ProgressRelay, ctx: Context | None, guard: dict[str, Any] | None
) -> CallToolResult | InputRequiredResult:
    if isinstance(held, str):
        return call_error(held, ready.call, guard)
    if held.call_id != ready.call.call_id and held.state == HeldCall.State.FORWARDED:
        why = (
            f"DO NOT PROCEED: not forwarded again: held call #{held.pk} was approved once and forwarded at "
            f"{held.finished_at:%Y-%m-%d %H:%M:%S} UTC; an approval covers one call. Its answer: "
            f"zerto_held_call_status with id {held.pk}"
        )
        return call_error(why, ready.call, guard)
    meta = _held_meta(held, ready.call, guard)
    wait = _meta_wait(ctx)
    if wait and held.state in HeldCall.OPEN and url_elicitation_available(ctx):
        return approval_elicitation(held, meta)
    result = await await_person(held, relay, wait=wait)
    return result.model_copy(update={"meta": {**(result.meta or {}), **meta}})


def _held_meta(held: HeldCall, call: GatewayCall, guard: dict[str, Any] | None = None) -> dict[str, Any]:
    return {**gateway_call_meta(call, guard), META_HELD: {"id": held.pk, "page": review_url(held)}}


def url_elicitation_available(ctx: Context | None) -> bool:
    """A 2026-07-28 request from a client that declares URL-mode elicitation (``elicitation: {url: {}}``)."""
    if ctx is None:
        return False
    try:
        version, capabilities = ctx.protocol_version, ctx.client_capabilities
    except ValueError:  # outside a request (a server used in-process)
        return False
    if version not in MODERN_PROTOCOL_VERSIONS or capabilities is None or capabilities.elicitation is None:
        return False
    return capabilities.elicitation.url is not None


def _elicitation_key(held: HeldCall) -> str:
    return f"held-call-{held.pk}"


def approval_elicitation(held: HeldCall, meta: dict[str, Any]) -> InputRequiredResult:
    """The ``input_required`` answer: open the held call's review page; the retry continues this held call."""
    where = f" on VM {held.vm}" if held.vm else ""
    message = (
        f"A person must approve this exact call of {held.tool}{where} before it runs (held call #{held.pk}: "
        f"{held.reason}). Open the page to read the call as it will be sent, then approve or deny it."
    )
    params = ElicitRequestURLParams(message=message, url=review_url(held), elicitation_id=_elicitation_key(held))
    return InputRequiredResult(
        input_requests={_elicitation_key(held): ElicitRequest(params=params)},
        request_state=f"zerto-rewind/held-call:{held.pk}:{held.arguments_digest}",
        _meta=meta,
    )


@dataclass(frozen=True)
class Continued:
    held: HeldCall
    call: GatewayCall


def held_to_continue(name: str, arguments: dict[str, Any], state: str) -> Continued | str:
    """The held call a retry's request state names, checked against this agent and these arguments;
    else why it is refused (the SDK checked the seal and the binding already: this is the second lock)."""
    match = HELD_STATE.fullmatch(state)
    if match is None:
        return "this requestState was not issued by this gateway for a held call"
    held = HeldCall.objects.filter(pk=int(match["id"]), mode=HeldCall.Mode.GATEWAY).first()
    if held is None or held.agent_id != current_agent_id() or held.exposed_name != name:
        return f"held call #{match['id']} is not a call of {name} by this agent"
    found = exported_tool(held.exposed_name)
    if found is not None and not agent_token_current(current_claims(), found.credentials_version):
        return "this agent token was revoked or its agent deactivated since it was verified"
    if not digest(arguments) == match["digest"] == held.arguments_digest:
        return f"these arguments are not the ones held call #{held.pk} holds for a person"
    call = GatewayCall.objects.filter(call_id=held.call_id).first()
    if call is None:
        return f"held call #{held.pk} has no gateway call"
    call_refers_to(held=held.pk)
    return Continued(held, call)


async def continue_held(
    name: str, arguments: dict[str, Any], state: str, ctx: Context | None
) -> CallToolResult | InputRequiredResult:
    """The retry after a URL elicitation: the same held call, never a new one. Accepted: wait for the person
    (then forwarded once, if approved); declined or cancelled: its id and page at once. Nothing else runs."""
    found = await run_db(held_to_continue, name, arguments, state)
    if isinstance(found, str):
        return CallToolResult(
            content=[TextContent(type="text", text=f"DO NOT PROCEED: not forwarded: {found}")], is_error=True
        )
    held, call = found.held, found.call
    answer = (ctx.input_responses if ctx is not None else None) or {}
    response = answer.get(_elicitation_key(held))
    accepted = isinstance(response, ElicitResult) and response.action == "accept"
    result = await await_person(held, ProgressRelay(ctx), wait=accepted)
    return result.model_copy(update={"meta": {**(result.meta or {}), **_held_meta(held, call)}})
