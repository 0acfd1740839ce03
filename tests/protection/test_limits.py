"""A VM outside an agent's limit: the look-up says so instead of showing it, and a guard or a recovery is
refused naming the limit, before anything is asked to change (over /mcp, real uvicorn and simulator)."""

from __future__ import annotations

from typing import Any

import pytest

from recoveries.models import RecoveryRequest
from rewind.agents import agent_update
from rewind.audit import Actor
from rewind.models import AuditEvent, ChangeGuard
from tests.helpers import call_tool, calls, tool_text
from tests.mcpfixtures import make_agent_token

pytestmark = pytest.mark.timeout(240)
INSERT = "POST /v1/vpgs/{vpg_id}/checkpoints"


def test_a_vm_outside_the_limit_is_named_so_and_never_changed(sim: Any, mcp_sites: Any, mcp_client: Any) -> None:
    agent, token = make_agent_token()
    agent_update(actor=Actor.user("root"), agent=agent, limit_vm_names="db*\n")
    changed = AuditEvent.objects.filter(action="agent.changed").latest("seq")
    assert changed.data["after"]["vm_limit"]["vm_names"] == ["db*"]
    assert changed.data["before"]["vm_limit"]["vm_names"] == []

    within = call_tool(mcp_client, token, "zerto_find_protection", {"vm": "db01"})
    assert not within.is_error, tool_text(within)
    outside = call_tool(mcp_client, token, "zerto_find_protection", {"vm": "web01"})
    assert outside.is_error
    assert f"VM web01 is outside agent {agent.name}'s limit (VM names db*)" in tool_text(outside)
    assert "vpg-web" not in tool_text(outside)

    guard = call_tool(mcp_client, token, "zerto_create_tagged_checkpoint", {"vm": "web01", "action": "edit nginx"})
    assert guard.is_error
    assert "outside agent" in tool_text(guard)
    recovery = call_tool(
        mcp_client, token, "zerto_recover_file", {"vm": "web01", "path": "/etc/nginx/nginx.conf", "reason": "broke it"}
    )
    assert recovery.is_error
    assert "outside agent" in tool_text(recovery)
    assert not ChangeGuard.objects.exists()
    assert not RecoveryRequest.objects.exists()
    assert calls(sim, "site-a", INSERT) == 0


def test_a_vpg_or_site_limit_is_judged_on_every_vpg_of_the_vm(sim: Any, mcp_sites: Any, mcp_client: Any) -> None:
    agent, token = make_agent_token()
    agent_update(actor=Actor.user("root"), agent=agent, limit_vpgs="vpg-web")  # web01 is in vpg-web-dr too
    outside = call_tool(mcp_client, token, "zerto_find_protection", {"vm": "web01"})
    assert "VPG vpg-web-dr protects it, and the VPGs allowed are vpg-web" in tool_text(outside)
    agent_update(actor=Actor.user("root"), agent=agent, limit_vpgs="", limit_sites="no such site")
    by_site = call_tool(mcp_client, token, "zerto_create_tagged_checkpoint", {"vm": "db01", "action": "x"})
    assert "the sites allowed are no such site" in tool_text(by_site)
    assert calls(sim, "site-a", INSERT) == 0
