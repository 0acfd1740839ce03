"""Undo a call nobody guarded: zerto_recover_file with before_call or point_in_time picks the newest
journal checkpoint before it (the simulator keeps one every few seconds), a person approves, the old
bytes come back."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from recoveries.models import RecoveryRequest
from recoveries.services import recovery_request_approve
from tests.gateway.support import GuestShellHttp, add_http_upstream
from tests.helpers import call_tool, poll_recovery_status, tool_text
from tests.mcpfixtures import make_agent_token

pytestmark = pytest.mark.timeout(300)
NGINX = "/etc/nginx/nginx.conf"


def recover(mcp_client: Any, token: str, **how: Any) -> Any:
    args = {"vm": "web01", "path": NGINX, "reason": "the agent broke nginx", **how}
    return call_tool(mcp_client, token, "zerto_recover_file", args)


def test_a_passed_call_is_undone_from_the_journal_checkpoint_before_it(
    sim: Any,
    mcp_sites: Any,
    mcp_client: Any,
    worker: Any,
    people: Any,
    guestshell_http: GuestShellHttp,
) -> None:
    add_http_upstream(guestshell_http, default_policy="pass")
    agent, token = make_agent_token()
    old = sim.read_file("web01", NGINX)
    broke = call_tool(
        mcp_client, token, "guestshell__write_file", {"host": "web01", "path": NGINX, "content": "oops\n"}
    )
    assert not broke.is_error, tool_text(broke)
    assert sim.read_file("web01", NGINX) == b"oops\n"
    call_id = broke.meta["zerto-rewind/call_id"]
    assert "zerto-rewind/guard" not in broke.meta  # nobody guarded it

    asked = recover(mcp_client, token, before_call=call_id)
    assert not asked.is_error, tool_text(asked)
    out = asked.structured_content
    checkpoint = out["checkpoint"]
    assert checkpoint["source"] == "before_call"
    assert checkpoint["before_call"] == call_id
    assert checkpoint["before_by_s"] > 0
    recovery = RecoveryRequest.objects.get(pk=out["id"])
    assert recovery.undo_call_id == call_id
    assert recovery.checkpoint_timestamp is not None
    assert recovery.undo_before is not None
    assert recovery.checkpoint_timestamp < recovery.undo_before

    recovery_request_approve(recovery_id=out["id"], user=people.approver)
    done = poll_recovery_status(mcp_client, token, out["id"])
    assert done["status"] == "succeeded", done
    assert done["result"]["content"].encode() == old
    assert agent.name == recovery.agent_name


def test_the_approval_page_shows_the_call_being_undone(
    sim: Any, mcp_sites: Any, mcp_client: Any, people: Any, client: Any, guestshell_http: GuestShellHttp
) -> None:
    add_http_upstream(guestshell_http, default_policy="pass")
    _agent, token = make_agent_token()
    broke = call_tool(mcp_client, token, "guestshell__write_file", {"host": "web01", "path": NGINX, "content": "x\n"})
    call_id = broke.meta["zerto-rewind/call_id"]
    asked = recover(mcp_client, token, before_call=call_id)
    assert not asked.is_error, tool_text(asked)
    client.force_login(people.approver)
    page = client.get(f"/admin/recoveries/recoveryrequest/{asked.structured_content['id']}/review/").content.decode()
    assert call_id in page
    assert "guestshell/write_file" in page
    assert "nobody guarded it" in page


def test_bad_moments_are_refused_and_say_which(
    sim: Any, mcp_sites: Any, mcp_client: Any, guestshell_http: GuestShellHttp
) -> None:
    add_http_upstream(guestshell_http, default_policy="hold")
    _mine, token = make_agent_token()
    _other, other_token = make_agent_token()
    held = call_tool(mcp_client, token, "guestshell__write_file", {"host": "web01", "path": NGINX, "content": "x"})
    assert held.is_error
    held_id = held.meta["zerto-rewind/call_id"]
    future = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    cases = [
        (token, {"before_call": held_id}, "was never forwarded"),
        (other_token, {"before_call": held_id}, "you made no call"),
        (token, {"before_call": "gwc_nope"}, "you made no call"),
        (token, {"point_in_time": future}, "is in the future"),
        (token, {"point_in_time": "2000-01-01T00:00:00Z"}, "older than the journal"),
        (token, {"point_in_time": "yesterday"}, "not an ISO 8601 time"),
        (token, {"point_in_time": "2026-01-01T00:00:00"}, "needs its time zone"),
        (token, {"point_in_time": "2026-01-01T00:00:00Z", "change_id": "CHG-1"}, "one way"),
    ]
    for who, how, words in cases:
        result = recover(mcp_client, who, **how)
        assert result.is_error, how
        assert words in tool_text(result), (how, tool_text(result))
    assert not RecoveryRequest.objects.exists()
