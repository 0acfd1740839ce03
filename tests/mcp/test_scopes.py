"""Scopes, for pasted tokens as for OAuth grants: tools/list shows what a token may call, a call outside its
scopes is 403 insufficient_scope naming the scope it needs, and tokens from before scopes keep every scope."""

from __future__ import annotations

from typing import Any

import pytest

from rewind.mcp import scopes
from rewind.models import AgentToken, ChangeGuard
from tests.helpers import post, rpc_result, run
from tests.mcpfixtures import make_agent_token

pytestmark = pytest.mark.timeout(240)
READ_TOOLS = {
    "zerto_find_protection",
    "zerto_checkpoint_status",
    "zerto_recovery_status",
    "zerto_list_flr_sessions",
    "zerto_list_mutating_tools",
    "zerto_held_call_status",
}


def _names(mcp_client: Any, token: str) -> set[str]:
    async def go() -> set[str]:
        async with mcp_client(token) as client:
            return {t.name for t in (await client.list_tools()).tools}

    return set(run(go()))


def _call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": name, "arguments": arguments}}


def test_a_read_only_token_finds_but_cannot_guard(mcp_server: Any, mcp_sites: Any, mcp_client: Any) -> None:
    _agent, token = make_agent_token(granted=(scopes.READ,))
    assert _names(mcp_client, token) == READ_TOOLS
    found = post(mcp_server.mcp_url, _call("zerto_find_protection", {"vm": "web01"}), token)
    assert rpc_result(found)["result"]["structuredContent"]["vm_name"] == "web01"

    refused = post(mcp_server.mcp_url, _call("zerto_guard_before_mutate", {"tool": "ssh/exec", "arguments": {}}), token)
    assert refused.status_code == 403
    challenge = refused.headers["www-authenticate"]
    assert challenge.startswith("Bearer resource_metadata=")
    assert 'scope="rewind:guard"' in challenge
    assert 'error="insufficient_scope"' in challenge
    assert refused.json()["error"] == "insufficient_scope"
    assert "needs the scope rewind:guard" in refused.json()["error_description"]
    assert not ChangeGuard.objects.exists()


@pytest.mark.parametrize(
    ("tool", "arguments", "needed"),
    [
        ("zerto_recover_file", {"vm": "web01", "path": "/etc/hosts", "reason": "test"}, scopes.RECOVER),
        ("zerto_end_flr_session", {"session_id": "x", "confirmed": True}, scopes.SESSIONS),
        ("zerto_add_mutating_tool", {"pattern": "x/y", "vm_arg": "host"}, scopes.CATALOG),
        ("zerto_create_tagged_checkpoint", {"vm": "web01", "action": "x"}, scopes.GUARD),
    ],
)
def test_each_tool_needs_its_own_scope(
    tool: str, arguments: dict[str, Any], needed: str, mcp_server: Any, transactional_db: None
) -> None:
    others = tuple(s for s in scopes.ALL if s != needed)
    _agent, token = make_agent_token(granted=others)
    refused = post(mcp_server.mcp_url, _call(tool, arguments), token)
    assert refused.status_code == 403
    assert f'scope="{needed}"' in refused.headers["www-authenticate"]


def test_tokens_from_before_scopes_keep_every_scope(mcp_server: Any, mcp_sites: Any, mcp_client: Any) -> None:
    _agent, token = make_agent_token()
    assert AgentToken.objects.get().scope == " ".join(scopes.ALL)  # what the migration gives existing rows
    assert READ_TOOLS | {"zerto_guard_before_mutate", "zerto_recover_file"} <= _names(mcp_client, token)


def test_at_2026_07_28_the_tool_is_read_from_the_mcp_name_header(mcp_server: Any, transactional_db: None) -> None:
    _agent, token = make_agent_token(granted=(scopes.READ,))
    headers = {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call"}
    body = _call("zerto_guard_before_mutate", {"tool": "ssh/exec", "arguments": {}})
    refused = post(mcp_server.mcp_url, body, token, **headers, **{"Mcp-Name": "zerto_guard_before_mutate"})
    assert refused.status_code == 403
    assert 'scope="rewind:guard"' in refused.headers["www-authenticate"]
    # A header that names another tool than the body does is the SDK's to refuse; nothing runs either way.
    lying = post(mcp_server.mcp_url, body, token, **headers, **{"Mcp-Name": "zerto_find_protection"})
    assert lying.status_code == 400, lying.text
    assert "error" in rpc_result(lying)
    assert not ChangeGuard.objects.exists()
