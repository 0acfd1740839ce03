"""Sending one call to its upstream, and what its answer carries back.

Shared by the gateway's forward path (``rewind.gateway.forward``) and the release of a call held for a
person (``rewind.gateway.release``): the same bound on a whole call, the same progress relay, the same
words for an upstream that failed, the same ``_meta`` naming the call.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Mapping
from typing import Any

from mcp.server.mcpserver import Context
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, TextContent

from rewind.gateway.links import Link, UpstreamCallBroke, UpstreamSpec, UpstreamUnavailable
from rewind.gateway.models import GatewayCall, UpstreamTool
from rewind.gateway.presenters import gateway_call_meta
from rewind.gateway.services import gateway_call_finish, upstream_link_record
from rewind.gateway.sessions import link_for
from rewind.mcp.context import commit_with_record, run_db

logger = logging.getLogger(__name__)

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
        self.wanted = request_meta(ctx).get("progress_token") is not None

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


def request_meta(ctx: Context | None) -> Mapping[str, Any]:
    """The ``_meta`` of the agent's request; empty without one."""
    if ctx is None:
        return {}
    try:
        meta = ctx.request_context.meta
    except (AttributeError, ValueError):
        return {}
    return meta if isinstance(meta, Mapping) else {}


def call_error(text: str, call: GatewayCall, guard: dict[str, Any] | None = None) -> CallToolResult:
    return with_meta(CallToolResult(content=[TextContent(type="text", text=text)], is_error=True), call, guard)


def with_meta(result: CallToolResult, call: GatewayCall, guard: dict[str, Any] | None) -> CallToolResult:
    return result.model_copy(update={"meta": {**(result.meta or {}), **gateway_call_meta(call, guard)}})


async def send(
    link: Link, tool: UpstreamTool, call: GatewayCall, arguments: dict[str, Any], relay: ProgressRelay
) -> CallToolResult:
    return (await send_outcome(link, tool, call, arguments, relay))[0]


async def send_held(
    spec: UpstreamSpec,
    tool: UpstreamTool,
    call: GatewayCall,
    arguments: dict[str, Any],
    relay: ProgressRelay,
    *,
    keep_link: bool = True,
) -> tuple[CallToolResult, str]:
    """A released held call to its upstream (``rewind.gateway.release``): the answer and how it ended.

    ``keep_link`` False (a worker's short event loop): the session is closed afterwards."""
    relay.upstream_starts()
    link = link_for(spec)
    try:
        result, outcome = await send_outcome(link, tool, call, arguments, relay)
    finally:
        if not keep_link:
            link.discard()
    return with_meta(result, call, None), outcome


async def send_outcome(
    link: Link, tool: UpstreamTool, call: GatewayCall, arguments: dict[str, Any], relay: ProgressRelay
) -> tuple[CallToolResult, str]:
    spec = link.spec
    failed = GatewayCall.Outcome.UPSTREAM_FAILED
    try:
        async with asyncio.timeout(spec.call_timeout_s + HARD_BOUND_GRACE_S):
            result = await link.call_tool(tool.name, arguments, relay.from_upstream if relay.wanted else None)
    except UpstreamUnavailable as exc:
        return await _failed(link, call, f"not forwarded: {exc.message}; the call did not run"), failed
    except UpstreamCallBroke as exc:
        return await _failed(link, call, f"{exc.message}; the call may or may not have run there"), failed
    except TimeoutError:
        link.discard()
        why = f"upstream {spec.name} did not finish {tool.name} within {spec.call_timeout_s:g} s"
        return await _failed(link, call, f"{why}; the call may or may not have run there"), failed
    except MCPError as exc:
        # The upstream answered with a JSON-RPC error: the session itself is fine.
        text = f"upstream {spec.name} answered the call of {tool.name} with an error: {str(exc)[:300]}"
        error = GatewayCall.Outcome.ERROR
        return await _failed(link, call, text, outcome=error), error
    await note_link(link)
    outcome = GatewayCall.Outcome.ERROR if result.is_error else GatewayCall.Outcome.OK
    # Committed with the call's mcp.tool.called row, which records the same outcome.
    await commit_with_record(functools.partial(gateway_call_finish, call=call, outcome=outcome))
    return result, outcome


async def note_link(link: Link) -> None:
    """Record a change of the link's health in this process (it went down, or answers again), once."""
    if link.changes == link.recorded_changes:
        return
    link.recorded_changes = link.changes
    await run_db(upstream_link_record, upstream_id=link.spec.pk, down_since=link.down_since, error=link.last_error)


async def _failed(
    link: Link, call: GatewayCall, text: str, *, outcome: str = GatewayCall.Outcome.UPSTREAM_FAILED
) -> CallToolResult:
    await note_link(link)
    await commit_with_record(functools.partial(gateway_call_finish, call=call, outcome=outcome, error=text))
    return call_error(text, call)
