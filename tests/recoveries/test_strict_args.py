"""Arguments that gate an action or name a record are strict, over real MCP (uvicorn → SDK → tools).

A wrong JSON type ("yes", 1 or "true" for a boolean; true, "3" or 3.0 for an id; a string
for a number of seconds; a blank selector) is refused with an error naming the argument,
and nothing happens: no row, no audit event but the call's own ``mcp.tool.called``, no ZVM
call.
"""

from __future__ import annotations

from typing import Any

import pytest

from recoveries.models import FlrSession, RecoveryRequest
from rewind.models import AuditEvent, ChangeGuard
from rewind.sites import site_client
from tests.helpers import call_tool_async, run
from tests.mcpfixtures import make_agent_token

pytestmark = pytest.mark.timeout(300)
SLUGS = ("site-a", "site-b", "site-c")

BAD_CALLS = [
    ("zerto_end_flr_session", {"session_id": "s-1", "confirmed": "yes"}, "confirmed"),
    ("zerto_end_flr_session", {"session_id": "s-1", "confirmed": 1}, "confirmed"),
    ("zerto_end_flr_session", {"session_id": "s-1", "confirmed": "true"}, "confirmed"),
    ("zerto_end_flr_session", {"session_id": " ", "confirmed": True}, "session_id"),
    ("zerto_end_flr_session", {"session_id": 7, "confirmed": True}, "session_id"),
    ("zerto_checkpoint_status", {"id": True}, "id"),
    ("zerto_checkpoint_status", {"id": "3"}, "id"),
    ("zerto_checkpoint_status", {"id": 3.0}, "id"),
    ("zerto_checkpoint_status", {"id": 0}, "id"),
    ("zerto_recovery_status", {"id": True}, "id"),
    ("zerto_recovery_status", {"id": "1"}, "id"),
    ("zerto_list_flr_sessions", {"live_only": "false"}, "live_only"),
    ("zerto_create_tagged_checkpoint", {"vm": "web01", "action": "edit", "timeout_s": "5"}, "timeout_s"),
    ("zerto_create_tagged_checkpoint", {"vm": "web01", "action": "edit", "timeout_s": True}, "timeout_s"),
    ("zerto_create_tagged_checkpoint", {"vm": "web01", "action": "edit", "timeout_s": 0}, "timeout_s"),
    ("zerto_create_tagged_checkpoint", {"vm": "web01", "action": "edit", "wait": "no"}, "wait"),
    ("zerto_create_tagged_checkpoint", {"vm": "web01", "action": "edit", "change_id": 12}, "change_id"),
    ("zerto_create_tagged_checkpoint", {"vm": "web01", "action": "edit", "change_id": ""}, "change_id"),
    (
        "zerto_guard_before_mutate",
        {"tool": "ssh/exec", "arguments": {"host": "web01"}, "action": "edit", "wait": 0},
        "wait",
    ),
    (
        "zerto_guard_before_mutate",
        {"tool": "ssh/exec", "arguments": {"host": "web01"}, "action": "edit", "change_id": True},
        "change_id",
    ),
    ("zerto_recover_file", {"vm": "web01", "path": "/etc/hostname", "reason": "x", "change_id": "  "}, "change_id"),
    ("zerto_recover_file", {"vm": "web01", "path": "/etc/hostname", "reason": "x", "checkpoint": ""}, "checkpoint"),
    ("zerto_recover_file", {"vm": "web01", "path": "/etc/hostname", "reason": "x", "change_id": 1}, "change_id"),
    ("zerto_recover_file", {"vm": "web01", "path": "/etc/hostname", "reason": "x", "wait": "true"}, "wait"),
]


def _snapshot(sim: Any) -> tuple[Any, ...]:
    calls = {slug: sim.calls(slug) for slug in SLUGS}
    rows = (
        ChangeGuard.objects.count(),
        RecoveryRequest.objects.count(),
        sorted(FlrSession.objects.values_list("pk", "status")),
    )
    events = list(AuditEvent.objects.exclude(action="mcp.tool.called").values_list("seq", flat=True))
    return calls, rows, events


def test_the_input_schema_shows_the_strict_types(transactional_db, mcp_server, mcp_client) -> None:
    _, token = make_agent_token()

    async def tools() -> dict[str, Any]:
        async with mcp_client(token, "auto") as client:
            return {t.name: t.input_schema for t in (await client.list_tools()).tools}

    schemas = run(tools())
    end = schemas["zerto_end_flr_session"]["properties"]
    assert end["confirmed"]["type"] == "boolean"
    assert "JSON true" in end["confirmed"]["description"]
    assert end["session_id"]["type"] == "string"
    assert end["session_id"]["minLength"] == 1
    status = schemas["zerto_checkpoint_status"]["properties"]["id"]
    assert status["type"] == "integer"
    assert status["minimum"] == 1
    timeout = schemas["zerto_create_tagged_checkpoint"]["properties"]["timeout_s"]["anyOf"][0]
    assert timeout["type"] == "number"
    assert timeout["minimum"] == 1
    assert timeout["maximum"] == 3600


@pytest.mark.parametrize(
    ("tool", "args", "argument"), BAD_CALLS, ids=[f"{t}-{a}-{i}" for i, (t, _, a) in enumerate(BAD_CALLS)]
)
def test_a_wrong_type_is_refused_naming_the_argument_and_changes_nothing(
    transactional_db, mcp_server, mcp_client, sim, sites, tool, args, argument
) -> None:
    _, token = make_agent_token()
    before = _snapshot(sim)

    result = run(call_tool_async(mcp_client, token, tool, args))

    assert result.is_error
    text = result.content[0].text
    # One plain sentence per bad argument, starting with its name.
    assert text.startswith(f"{argument}: ") or f". {argument}: " in text, text
    assert _snapshot(sim) == before


def test_ending_a_session_needs_json_true(transactional_db, mcp_server, mcp_client, sim, sites, tagged) -> None:
    """Our own live session: "yes", 1, "true" and false leave it mounted; true unmounts it."""
    agent, token = make_agent_token()
    guard = tagged("db01", agent_name=agent.name)
    vpg = guard.vpgs.get()
    client = site_client(sites["site-b"])
    session_id = client.flr_mount(
        vpg_id=vpg.vpg_identifier, vm_id=guard.vm_identifier, checkpoint_id=vpg.checkpoint_identifier
    )
    row = FlrSession.objects.create(
        site=sites["site-b"],
        session_id=session_id,
        vm_identifier=guard.vm_identifier,
        vpg_identifier=vpg.vpg_identifier,
        checkpoint_identifier=vpg.checkpoint_identifier,
        status=FlrSession.Status.MOUNTED,
    )
    before = _snapshot(sim)

    for confirmed in ("yes", 1, "true", "True", [True], None):
        result = run(
            call_tool_async(
                mcp_client, token, "zerto_end_flr_session", {"session_id": session_id, "confirmed": confirmed}
            )
        )
        assert result.is_error
        assert "confirmed" in result.content[0].text
    refused = run(
        call_tool_async(mcp_client, token, "zerto_end_flr_session", {"session_id": session_id, "confirmed": False})
    )
    assert refused.is_error
    assert "confirmed=true" in refused.content[0].text

    assert _snapshot(sim) == before
    assert session_id in {s["session_id"] for s in sim.sessions("site-b")}

    done = run(
        call_tool_async(mcp_client, token, "zerto_end_flr_session", {"session_id": session_id, "confirmed": True})
    )
    assert not done.is_error, done.content
    assert done.structured_content["ok"] is True
    row.refresh_from_db()
    assert row.status in (FlrSession.Status.ENDED, FlrSession.Status.UNMOUNTING)
