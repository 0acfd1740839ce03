"""Guard and checkpoint tools (the catalog that decides which tools are guarded has its own, in catalog).

The slow part (insert + wait until listed) runs in the Celery task; with ``wait`` a tool
polls the record and streams progress ("VPGs listed so far / total", each notification higher
than the one before) until the guard is finished, then answers with the per-VPG outcome.
``wait=false`` answers at once with the id to poll with ``zerto_checkpoint_status``.

An answer that says not to proceed is a tool error (``isError``) whose text starts with
"DO NOT PROCEED" and why, with the structured answer still attached: an agent that reads only
the error flag or only the text cannot miss it. A request still running (``wait=false``) is
not an error; its text says not to proceed yet.
"""

from __future__ import annotations

import asyncio
import time
from typing import Annotated, Any, Protocol

from django.utils import timezone
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field, StrictFloat, StrictStr

from rewind.approvals.models import HeldCall
from rewind.approvals.presenters import HeldCallOut, held_status_result
from rewind.checkpoints.holds import held_call_advance, hold_after_guard
from rewind.checkpoints.models import ChangeGuard
from rewind.checkpoints.presenters import GuardOut, guard_held, guard_out, guard_report
from rewind.checkpoints.selectors import GuardProgress, guard_progress, guard_tallies
from rewind.checkpoints.services import TIMEOUT_MAX_S, guard_before_mutate, guard_create, guard_read_and_resume
from rewind.checkpoints.tags import new_change_id
from rewind.lib.errors import NotFoundError
from rewind.lib.requestid import current_request_id
from rewind.mcp import scopes
from rewind.mcp.args import Flag, RecordId, Selector
from rewind.mcp.context import (
    SharedReads,
    call_refers_to,
    current_agent_id,
    current_agent_name,
    run_db,
    run_db_retried,
)
from rewind.policy.models import Decision

# First in the tool list: the server's instructions make the guard every agent's first call.
TOOLS_POSITION = 10

# A waiting call answers by the guard's own deadline (its request time plus timeout_s) and
# this grace for the last poll round to be recorded, whatever the workers do; a guard not
# finished by then is answered "not finished", with what it waits for.
WAIT_GRACE_S = 2.0
POLL_MIN_S, POLL_MAX_S = 0.05, 1.0
RESUME_EVERY_S = 5.0
# What a waiting guard is queued behind is worked out again when its status or count moves,
# and otherwise this often: it costs a query per site (``guard_tallies`` is read in between).
QUEUE_EVERY_S = 2.0
# The waiting calls of a process read their guards' tallies together: one statement a round for
# all of them, instead of one each (a hundred calls waiting polled up to 2,000 times a second at first).
_tallies: SharedReads[int, GuardProgress] = SharedReads(guard_tallies, run=run_db_retried)
TimeoutSeconds = Annotated[StrictFloat, Field(ge=1, le=TIMEOUT_MAX_S)]
# The description sits outside the optional type, or the schema would bury it in anyOf.
Timeout = Annotated[
    TimeoutSeconds | None,
    Field(
        description=f"How long each VPG may take to list the checkpoint: seconds from 1 to {TIMEOUT_MAX_S:g}, "
        "a JSON number, e.g. 300; omit for the service's default"
    ),
]
Vm = Annotated[
    StrictStr,
    Field(description='The VM: its name, a host FQDN or short hostname, or the Zerto vmIdentifier, e.g. "web01"'),
]
Action = Annotated[
    StrictStr,
    Field(
        description="In a few words, what you are about to change; it goes into the "
        'checkpoint tag, e.g. "edit nginx.conf"'
    ),
]
ChangeId = Annotated[
    Selector | None,
    Field(
        description="Your id for this change, a non-blank string, e.g. "
        '"CHG-2291"; the same id for the same VM returns the same '
        "request instead of a second checkpoint. Omit to get a new one"
    ),
]
Wait = Annotated[
    Flag,
    Field(
        description="JSON true (default): stream progress and answer once the guard has "
        "finished; false: answer at once with an id for zerto_checkpoint_status"
    ),
]
ToolName = Annotated[StrictStr, Field(description='The tool you are about to call, as server/tool, e.g. "ssh/exec"')]
ToolArguments = Annotated[
    dict[str, Any],
    Field(
        description="That call's exact arguments, a JSON object, e.g. "
        '{"host": "web01", "command": "systemctl '
        'restart nginx"}: the VM is read from them'
    ),
]


class ProgressReporter(Protocol):
    """Where a waiting guard reports progress: the tool's ``Context``, or a relay that forwards to one."""

    async def report_progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None: ...


def guard_result(out: GuardOut, *, pending_is_error: bool = True) -> CallToolResult:
    """The answer as a tool result: an error, whose text starts by saying not to proceed, unless ``ok``.

    A request still running is an error too, unless ``pending_is_error`` is off (``wait=false``,
    or polling the status: the agent was told to come back, and the text says not to proceed yet).
    """
    structured = out.model_dump(mode="json")
    if out.held is not None and not out.ok:
        head = (
            f"HELD FOR A PERSON: do not make the change yet. Held call #{out.held.id} ({out.held.state}): "
            f"{out.held.next}"
        )
        return CallToolResult(
            content=[TextContent(type="text", text=f"{head}\n\n{out.model_dump_json(indent=2)}")],
            structured_content=structured,
            is_error=True,
        )
    if out.ok:
        return CallToolResult(
            content=[TextContent(type="text", text=out.model_dump_json(indent=2))], structured_content=structured
        )
    if not out.finished and not pending_is_error:
        head = (
            f"Do not proceed yet: guard #{out.id} is not finished "
            f"({out.listed}/{out.total} VPGs list the checkpoint). Call zerto_checkpoint_status with id "
            f"{out.id} until finished is true, and proceed only if ok is true."
        )
        return CallToolResult(
            content=[TextContent(type="text", text=f"{head}\n\n{out.model_dump_json(indent=2)}")],
            structured_content=structured,
        )
    why = out.must_not_proceed or f"the guard ended {out.status}"
    head = (
        f"DO NOT PROCEED: do not make the change to {out.vm or 'the VM'}. {why.rstrip('.')}. "
        "Report this to the user; do not retry in a loop."
    )
    if out.landed:
        head += " Checkpoints that did land: " + ", ".join(f"{v.name} ({v.checkpoint_identifier})" for v in out.landed)
        head += "."
    return CallToolResult(
        content=[TextContent(type="text", text=f"{head}\n\n{out.model_dump_json(indent=2)}")],
        structured_content=structured,
        is_error=True,
    )


def _own_guard(guard_id: int) -> ChangeGuard:
    guard = guard_read_and_resume(guard_id)
    if guard.agent_name != current_agent_name():
        raise NotFoundError(f"you have no guard #{guard_id}")
    return guard


def _status(guard_id: int) -> GuardOut:
    guard = _own_guard(guard_id)
    out = guard_report(guard)
    held = HeldCall.objects.filter(guard=guard, mode=HeldCall.Mode.GUARD).order_by("-pk").first()
    return guard_held(out, held_call_advance(held)) if held is not None else out


def _hold(guard_id: int, tool: str, arguments: dict[str, Any]) -> GuardOut:
    """Guard-only mode, decision ``approve``: the call held for a person once (or while) its guard is taken."""
    guard = ChangeGuard.objects.get(pk=guard_id)
    held = hold_after_guard(
        guard=guard,
        mode=HeldCall.Mode.GUARD,
        tool=tool.strip().lower(),
        arguments=arguments,
        agent_id=current_agent_id(),
        agent_name=current_agent_name(),
        request_id=current_request_id() or "",
    )
    call_refers_to(held=held.pk)
    return guard_held(guard_report(guard), held)


async def guard_follow(out: GuardOut, ctx: ProgressReporter | None) -> GuardOut:
    """Poll the record until the guard ends or its deadline passes, streaming progress.

    Progress is "VPGs listed so far / total"; while the guard is queued (for a worker, or
    behind other guards for its site's request cap) the message says so and how many are
    ahead. Each notification's progress is higher than the last, as the spec requires: a new
    message without a newly listed VPG moves it up by a small step, never to the next VPG.
    """
    if out.id is None or out.finished:
        return out
    guard_id, started = out.id, time.monotonic()
    # Every notification names the guard and its change id, the first included: an agent whose
    # call is cut (its web process died, the network broke) asks for the outcome with them.
    named = f"guard #{guard_id} (change_id {out.change_id})"
    first = await run_db_retried(guard_progress, guard_id)
    remaining = (first.deadline - timezone.now()).total_seconds() if first.deadline else 0.0
    deadline = started + max(0.0, remaining) + WAIT_GRACE_S
    reported, said = -1.0, ""
    last_resume = started
    queue = _QueueRead(first)
    while True:
        progress = await _tallies(guard_id)
        if queue.due(progress):
            progress = await run_db_retried(guard_progress, guard_id)
            queue.read(progress)
        words = f"{named}: {progress.listed}/{progress.total} VPGs list the checkpoint"
        if queue.waiting_for and progress.status in ChangeGuard.UNFINISHED:
            words += f"; {queue.waiting_for}"
        value = float(progress.listed) if progress.listed > reported else min(reported + 0.01, progress.listed + 0.99)
        if ctx is not None and words != said and value > reported:
            await ctx.report_progress(value, progress.total, words)
            reported, said = value, words
        if progress.status in (ChangeGuard.Status.OK, ChangeGuard.Status.FAILED) or time.monotonic() >= deadline:
            break
        if time.monotonic() - last_resume >= RESUME_EVERY_S:
            await run_db_retried(guard_read_and_resume, guard_id)  # restarts a dead poller of its sites
            last_resume = time.monotonic()
        waited = time.monotonic() - started
        pause = max(POLL_MIN_S, min(POLL_MAX_S, 0.025 * waited))
        await asyncio.sleep(max(0.0, min(pause, deadline - time.monotonic())))
    final = await run_db_retried(_status, guard_id)
    return final.model_copy(update={"catalog_entry": out.catalog_entry, "reused": out.reused})


class _QueueRead:
    """When a waiting call last worked out what its guard is queued behind, and what it found."""

    def __init__(self, progress: GuardProgress) -> None:
        self.read(progress)

    def read(self, progress: GuardProgress) -> None:
        self.at, self.seen = time.monotonic(), (progress.status, progress.listed)
        self.waiting_for = progress.waiting_for

    def due(self, progress: GuardProgress) -> bool:
        moved = (progress.status, progress.listed) != self.seen
        return moved or time.monotonic() - self.at >= QUEUE_EVERY_S


def _change_for_this_call(change_id: str | None) -> str:
    """The caller's change id, or one made now, before anything is recorded: a creation tried again
    (the database did not answer) or a call the agent repeats with it returns the same guard."""
    change = change_id or new_change_id()
    call_refers_to(change_id=change)
    return change


def _create(vm: str, action: str, change_id: str, timeout_s: float | None) -> GuardOut:
    outcome = guard_create(
        agent_name=current_agent_name(),
        agent_id=current_agent_id(),
        vm=vm,
        action=action,
        change_id=change_id,
        timeout_s=timeout_s,
    )
    call_refers_to(guard=outcome.guard.pk if outcome.guard else None)
    return guard_out(outcome)


def _guard(tool: str, arguments: dict[str, Any], action: str, change_id: str, timeout_s: float | None) -> GuardOut:
    outcome = guard_before_mutate(
        agent_name=current_agent_name(),
        agent_id=current_agent_id(),
        tool=tool,
        arguments=arguments,
        action=action,
        change_id=change_id,
        timeout_s=timeout_s,
    )
    call_refers_to(guard=outcome.guard.pk if outcome.guard else None)
    return guard_out(outcome, tool=tool.strip().lower())


async def zerto_create_tagged_checkpoint(
    vm: Vm,
    action: Action,
    change_id: ChangeId = None,
    wait: Wait = True,
    timeout_s: Timeout = None,
    ctx: Context | None = None,
) -> Annotated[CallToolResult, GuardOut]:
    """Put the same tagged checkpoint on every Zerto VPG protecting a VM and wait until Zerto lists it.

    `vm`: VM name, hostname or vmIdentifier. `action`: what you are about to change (goes into the tag
    `ai:<you> | <action> | vm=<vm> | change=<id> | <utc>`). `change_id`: your id for the change (one is made
    when omitted); asking again with the same change_id for the same VM returns the same request, never a
    second checkpoint. With `wait` (default) the call streams progress and answers when every VPG lists the
    checkpoint (`ok`) or one failed/timed out (`timeout_s`, default from the service). `ok` false: do not
    make the change; `landed` says which checkpoints did land. `wait=false` answers at once with `id`.
    """
    change = _change_for_this_call(change_id)
    out = await run_db_retried(_create, vm, action, change, timeout_s)
    return guard_result(await guard_follow(out, ctx) if wait else out, pending_is_error=wait)


async def zerto_guard_before_mutate(
    tool: ToolName,
    arguments: ToolArguments,
    action: Action,
    change_id: ChangeId = None,
    wait: Wait = True,
    ctx: Context | None = None,
) -> Annotated[CallToolResult, GuardOut]:
    """Call this before ANY tool call that may change a VM; proceed only if the answer is `ok`.

    `tool`: the tool you are about to call as server/tool (e.g. ssh/exec); `arguments`: its exact arguments;
    `action`: what the call will change. If the mutating-tool catalog lists the tool, the VM is read from the
    argument the catalog names (e.g. `host`), and every VPG protecting it gets a tagged checkpoint; the call
    waits until Zerto lists them all. If the catalog does not list the tool, it passes through (`guarded`
    false, `ok` true) and the sighting is recorded for a human to classify. A listed tool whose VM argument
    is missing is an error. `ok` false: do not make the change (`must_not_proceed` says why).
    """
    change = _change_for_this_call(change_id)
    out = await run_db_retried(_guard, tool, arguments, action, change, None)
    followed = await guard_follow(out, ctx) if wait else out
    if out.decision == Decision.APPROVE and out.id is not None and (followed.ok or not followed.finished):
        held = await run_db(_hold, out.id, tool, arguments)
        return guard_result(
            held.model_copy(update={"catalog_entry": out.catalog_entry, "reused": out.reused}), pending_is_error=wait
        )
    return guard_result(followed, pending_is_error=wait)


async def zerto_checkpoint_status(
    id: Annotated[
        RecordId,
        Field(description="The guard's id from its answer: a JSON integer, e.g. 42"),
    ],
) -> Annotated[CallToolResult, GuardOut]:
    """Status of one of your guards (from zerto_create_tagged_checkpoint or zerto_guard_before_mutate).

    `ok` true once every VPG lists the tagged checkpoint; `finished` with `ok` false means do not proceed.
    """
    return guard_result(await run_db_retried(_status, id), pending_is_error=False)


def _held_status(held_id: int) -> CallToolResult:
    held = HeldCall.objects.filter(pk=held_id, agent_name=current_agent_name()).first()
    if held is None:
        raise NotFoundError(f"you have no held call #{held_id}")
    return held_status_result(held_call_advance(held))


async def zerto_held_call_status(
    id: Annotated[
        RecordId, Field(description="The held call's id from the answer that held it: a JSON integer, e.g. 7")
    ],
) -> Annotated[CallToolResult, HeldCallOut]:
    """Status of one of your calls held for a person (a gateway call, or zerto_guard_before_mutate's `held`).

    `state`: pending (waiting for a person, at `page`), approved, denied, expired, forwarded (the gateway sent
    exactly the approved arguments once; the upstream's answer is the content) or refused (`refusal` says why:
    the policy now denies, a checkpoint is gone, a stop, ...). Only `approved` (guard-only) or `forwarded` mean
    the change went or may go ahead. No tool can approve a call: only a person, on its page.
    """
    return await run_db_retried(_held_status, id)


def register(server: MCPServer) -> None:
    def changes(title: str) -> ToolAnnotations:
        # Not idempotent: only a repeated change_id returns the same request; two calls without one
        # put two checkpoints on every VPG. Not destructive: a checkpoint only adds a point in time.
        return ToolAnnotations(
            title=title, read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
        )

    def reads(title: str) -> ToolAnnotations:
        return ToolAnnotations(
            title=title, read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
        )

    for fn, title, hints, scope in (
        (zerto_create_tagged_checkpoint, "Tagged checkpoint on every VPG of a VM", changes, scopes.GUARD),
        (zerto_guard_before_mutate, "Guard a VM before changing it", changes, scopes.GUARD),
        (zerto_checkpoint_status, "Status of a guard", reads, scopes.READ),
        (zerto_held_call_status, "Status of a call held for a person", reads, scopes.READ),
    ):
        server.tool(name=fn.__name__, title=title, annotations=hints(title), meta=scopes.tool_meta(scope))(fn)
