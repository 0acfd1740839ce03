"""What a person changes decides the very next call through the gateway, in a process that just
served a call (and so holds whatever it caches): a tool put on hold, an upstream switched off, a
tool its upstream no longer lists, a revoked token, a deactivated agent. Each over real MCP calls
on HTTP, one session, the same process."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from mcp.shared.exceptions import MCPError

from rewind.agents import agent_token_revoke, agent_update
from rewind.agents.models import AgentToken
from rewind.audit import Actor
from rewind.gateway.models import GatewayCall, UpstreamTool
from rewind.gateway.services import ListedTool, upstream_tool_set_policy, upstream_tools_record, upstream_update
from tests.gateway.support import GuestShellHttp, add_http_upstream
from tests.helpers import run, tool_text

pytestmark = pytest.mark.timeout(240)
ADMIN = Actor.user("admin")
TOOL, ARGS = "guestshell__slow", {"seconds": 0}  # annotated read-only: passes by default


def _twice(mcp_client: Any, token: str, between: Callable[[], object]) -> tuple[Any, Any]:
    """A call, ``between()``, and the next call, in one session: (first result, second result or MCPError)."""

    async def go() -> tuple[Any, Any]:
        async with mcp_client(token) as client:
            first = await client.call_tool(TOOL, ARGS)
            await asyncio.to_thread(between)
            try:
                second = await client.call_tool(TOOL, ARGS)
            except MCPError as exc:
                second = exc
            return first, second

    return run(go())


def _forwarded(shell: GuestShellHttp) -> int:
    return sum(1 for c in shell.calls() if c.get("tool") == "slow")


def test_a_tool_put_on_hold_is_held_on_the_next_call(
    mcp_sites: Any, agent_token: Any, mcp_client: Any, guestshell_http: GuestShellHttp
) -> None:
    add_http_upstream(guestshell_http)
    tool = UpstreamTool.objects.get(exposed_name=TOOL)
    first, second = _twice(
        mcp_client, agent_token[1], lambda: upstream_tool_set_policy(actor=ADMIN, tool=tool, policy="hold")
    )
    assert not first.is_error, tool_text(first)
    assert second.is_error
    assert "held until a person classifies it" in tool_text(second)
    assert GatewayCall.objects.get(call_id=second.meta["zerto-rewind/call_id"]).decision == "held"
    assert _forwarded(guestshell_http) == 1


def test_a_disabled_upstream_is_not_called_on_the_next_call(
    mcp_sites: Any, agent_token: Any, mcp_client: Any, guestshell_http: GuestShellHttp
) -> None:
    upstream = add_http_upstream(guestshell_http)
    first, second = _twice(
        mcp_client, agent_token[1], lambda: upstream_update(actor=ADMIN, upstream=upstream, enabled=False)
    )
    assert not first.is_error, tool_text(first)
    assert second.is_error
    assert f"unknown tool {TOOL!r}" in tool_text(second)
    assert _forwarded(guestshell_http) == 1


def test_a_tool_its_upstream_no_longer_lists_is_not_called_on_the_next_call(
    mcp_sites: Any, agent_token: Any, mcp_client: Any, guestshell_http: GuestShellHttp
) -> None:
    upstream = add_http_upstream(guestshell_http)
    others = [
        ListedTool(t.name, t.title, t.description, t.input_schema, t.output_schema, t.annotations, t.meta)
        for t in UpstreamTool.objects.filter(upstream=upstream).exclude(exposed_name=TOOL)
    ]
    first, second = _twice(
        mcp_client,
        agent_token[1],
        lambda: upstream_tools_record(upstream=upstream, listed=others, reserved=set()),
    )
    assert not first.is_error, tool_text(first)
    assert UpstreamTool.objects.get(exposed_name=TOOL).state == "gone"
    assert second.is_error
    assert f"unknown tool {TOOL!r}" in tool_text(second)
    assert _forwarded(guestshell_http) == 1


@pytest.mark.parametrize("change", ["revoke the token", "deactivate the agent"])
def test_a_revoked_token_or_deactivated_agent_is_refused_on_the_next_call(
    mcp_sites: Any, agent_token: Any, mcp_client: Any, guestshell_http: GuestShellHttp, change: str
) -> None:
    add_http_upstream(guestshell_http)
    agent, token = agent_token

    def between() -> None:
        if change == "revoke the token":
            assert agent_token_revoke(actor=ADMIN, token=AgentToken.objects.get(agent=agent))
        else:
            agent_update(actor=ADMIN, agent=agent, is_active=False)

    first, second = _twice(mcp_client, token, between)
    assert not first.is_error, tool_text(first)
    refused = str(second) if isinstance(second, Exception) else tool_text(second)
    assert "revoked" in refused, refused
    assert _forwarded(guestshell_http) == 1
