"""Least privilege through the gateway, per call: rewind:read to call an upstream's tool, rewind:guard too when
the policy guards it; a guarded call for a VM outside the agent's limit is refused before the guard. Either
way nothing is forwarded."""

from __future__ import annotations

from typing import Any

import pytest

from catalog.services import mutating_tool_add
from rewind.agents import agent_update
from rewind.audit import Actor
from rewind.mcp import scopes
from rewind.models import ChangeGuard, GatewayCall
from tests.gateway.support import GuestShellHttp, add_http_upstream
from tests.helpers import call_tool, tool_text
from tests.mcpfixtures import make_agent_token

pytestmark = pytest.mark.timeout(240)


def test_a_gateway_call_that_needs_a_guard_needs_the_guard_scope(
    sim: Any, mcp_sites: Any, mcp_client: Any, guestshell_http: GuestShellHttp
) -> None:
    add_http_upstream(guestshell_http)
    mutating_tool_add(actor=Actor.user("admin"), pattern="guestshell/exec", vm_arg="host", description="shell")
    _agent, token = make_agent_token(granted=(scopes.READ,))
    result = call_tool(mcp_client, token, "guestshell__exec", {"host": "web01", "command": "rm -rf /etc/nginx"})
    assert result.is_error
    assert "insufficient_scope" in tool_text(result)
    assert "rewind:guard" in tool_text(result)
    assert guestshell_http.calls() == []
    assert GatewayCall.objects.get().decision == GatewayCall.Decision.REFUSED
    assert not ChangeGuard.objects.exists()
    # A read-only upstream tool passes on rewind:read.
    read = call_tool(mcp_client, token, "guestshell__read_file", {"host": "web01", "path": "/etc/hostname"})
    assert not read.is_error, tool_text(read)


def test_a_guarded_call_for_a_vm_outside_the_agents_limit_is_refused_before_the_guard(
    sim: Any, mcp_sites: Any, mcp_client: Any, guestshell_http: GuestShellHttp
) -> None:
    add_http_upstream(guestshell_http)
    mutating_tool_add(actor=Actor.user("admin"), pattern="guestshell/exec", vm_arg="host", description="shell")
    agent, token = make_agent_token()
    agent_update(actor=Actor.user("root"), agent=agent, limit_vm_names="db*")
    result = call_tool(mcp_client, token, "guestshell__exec", {"host": "web01", "command": "rm -rf /etc/nginx"})
    assert result.is_error
    assert f"VM web01 is outside agent {agent.name}'s limit (VM names db*)" in tool_text(result)
    assert guestshell_http.calls() == []
    assert GatewayCall.objects.get().decision == GatewayCall.Decision.REFUSED
    assert not ChangeGuard.objects.exists()
    assert sim.calls("site-a").get("POST /v1/vpgs/{vpg_id}/checkpoints", 0) == 0
