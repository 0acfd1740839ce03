"""Hostile input to /mcp is refused before anything is done: undeclared arguments, malformed envelopes, VM
queries that can name no VM. Over real MCP (uvicorn → guard → SDK → tools), in both protocol eras."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rewind.models import AuditEvent, ChangeGuard
from tests.helpers import LEGACY, call_body, call_tool_async, post, run
from tests.mcpfixtures import make_agent_token

SLUGS = ("site-a", "site-b")
MODERN = "2026-07-28"


def _sim_calls(sim: Any) -> dict[str, Any]:
    return {slug: sim.calls(slug) for slug in SLUGS}


def _changes() -> tuple[int, list[str]]:
    return ChangeGuard.objects.count(), list(
        AuditEvent.objects.exclude(action="mcp.tool.called").values_list("action", flat=True)
    )


def test_a_misspelt_argument_is_refused_with_the_one_meant(
    transactional_db, mcp_server, mcp_client, sim, sites
) -> None:
    _, token = make_agent_token()
    before, calls = _changes(), _sim_calls(sim)
    args = {"tool": "ssh/exec", "arguments": {"host": "web01"}, "action": "edit", "change_idd": "CHG-1"}

    result = run(call_tool_async(mcp_client, token, "zerto_guard_before_mutate", args))

    assert result.is_error
    text = result.content[0].text
    assert "has no argument `change_idd`; did you mean `change_id`?" in text
    assert "Nothing was done" in text
    assert (_changes(), _sim_calls(sim)) == (before, calls)
    event = AuditEvent.objects.filter(action="mcp.tool.called").latest("seq")
    assert event.data["outcome"] == "error"


def test_an_argument_the_tool_does_not_have_is_refused_not_dropped(
    transactional_db, mcp_server, mcp_client, sim, sites
) -> None:
    """The guard has no timeout_s: before, the call ran a real guard and inserted checkpoints."""
    _, token = make_agent_token()
    before, calls = _changes(), _sim_calls(sim)
    args = {"tool": "ssh/exec", "arguments": {"host": "web01"}, "action": "edit", "timeout_s": "abc"}

    result = run(call_tool_async(mcp_client, token, "zerto_guard_before_mutate", args))

    assert result.is_error
    assert "has no argument `timeout_s`" in result.content[0].text
    assert (_changes(), _sim_calls(sim)) == (before, calls)


@pytest.mark.parametrize(
    "vm",
    ["web01\x00", "../../etc", "web01,web02", "web01;db01", "web\u202e10", "web\u200b01", "a\nb"],
    ids=["nul", "traversal", "comma-list", "semicolon-list", "rtl-override", "zero-width", "newline"],
)
def test_a_vm_query_that_can_name_no_vm_never_reaches_a_zvm(
    vm: str, transactional_db, mcp_server, mcp_client, sim, sites
) -> None:
    _, token = make_agent_token()
    calls = _sim_calls(sim)
    for tool, args in (
        ("zerto_find_protection", {"vm": vm}),
        ("zerto_create_tagged_checkpoint", {"vm": vm, "action": "edit"}),
        ("zerto_recover_file", {"vm": vm, "path": "/etc/hostname", "reason": "test"}),
    ):
        result = run(call_tool_async(mcp_client, token, tool, args))
        assert result.is_error, (tool, result.content)
        assert "no protected VM matches" not in result.content[0].text
    assert _sim_calls(sim) == calls
    assert ChangeGuard.objects.count() == 0


@pytest.mark.parametrize("era", [LEGACY, MODERN])
def test_a_lone_surrogate_in_a_vm_name_is_refused_too(era: str, transactional_db, mcp_server, sim, sites) -> None:
    """No SDK client can send one (it is not UTF-8), but JSON can carry it escaped: not JSON the SDK reads."""
    _, token = make_agent_token()
    calls = _sim_calls(sim)
    resp = post(mcp_server.mcp_url, json.dumps(call_body(vm="web\ud80001")), token, **{"MCP-Protocol-Version": era})
    assert resp.status_code == 400
    assert resp.json()["error"]["code"] == -32700
    assert _sim_calls(sim) == calls


MALFORMED = [
    (b'{"foo": 1}', -32600, "not a JSON-RPC 2.0 message"),
    (b'{"jsonrpc": "2.0", "foo": 1}', -32600, "neither a request"),
    (json.dumps([call_body(), call_body(rpc_id=2)]).encode(), -32600, "batches are not supported"),
    (json.dumps({**call_body(), "jsonrpc": "1.0"}).encode(), -32600, '"jsonrpc" must be "2.0"'),
    (json.dumps({**call_body(), "id": {"x": "y" * 5000}}).encode(), -32600, "id must be a string or an integer"),
    (json.dumps({**call_body(), "method": ["tools/call"]}).encode(), -32600, "method must be a string"),
    (json.dumps({**call_body(), "params": "x" * 5000}).encode(), -32600, "params must be an object"),
    (b'"just a string"', -32600, "must be one JSON-RPC message object"),
    (b"{not json", -32700, "parse error"),
    (b"[" * 5000 + b"]" * 5000, -32700, "recursion limit exceeded"),
    (b'{"jsonrpc": "2.0", "id": 1, "method": "x", "params": {}, "n": 1' + b"1" * 5000 + b"}", -32700, "out of range"),
    (b"\xff\xfe{}", -32700, "parse error"),
]


@pytest.mark.parametrize("era", [LEGACY, MODERN])
@pytest.mark.parametrize(("body", "code", "says"), MALFORMED, ids=[m[2] for m in MALFORMED])
def test_a_malformed_envelope_gets_the_code_the_spec_names_and_a_short_message(
    era: str, body: bytes, code: int, says: str, mcp_server, agent_token
) -> None:
    resp = post(mcp_server.mcp_url, body, agent_token[1], **{"MCP-Protocol-Version": era})
    assert resp.status_code == 400
    error = resp.json()["error"]
    assert error["code"] == code
    assert says in error["message"]
    assert len(error["message"]) <= 200, error["message"]
    assert "yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy" not in resp.text
