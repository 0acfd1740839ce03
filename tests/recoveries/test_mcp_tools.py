"""The recovery tools over real MCP (uvicorn), with the real worker and the simulator."""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any
from urllib.parse import urlsplit

import pytest
import requests

from recoveries.models import RecoveryRequest
from recoveries.services import recovery_request_approve
from tests.fixtures import wait_until
from tests.helpers import call_tool_async, poll_recovery_status, run, tool_ok
from tests.mcpfixtures import make_agent_token

pytestmark = pytest.mark.timeout(300)


def test_an_agent_asks_a_person_approves_and_the_agent_gets_the_old_text(
    worker, mcp_server, mcp_client, sim, sites, people, tagged
) -> None:
    agent, token = make_agent_token()
    old = sim.read_file("web01", "/etc/nginx/nginx.conf")
    tagged("web01", "chg-9", agent_name=agent.name)
    sim.set_file("web01", "/etc/nginx/nginx.conf", text="oops\n")

    asked = tool_ok(
        run(
            call_tool_async(
                mcp_client,
                token,
                "zerto_recover_file",
                {"vm": "web01", "path": "/etc/nginx/nginx.conf", "reason": "nginx broke", "change_id": "chg-9"},
            )
        )
    )
    assert asked["status"] == "pending"
    assert asked["approval_url"].endswith(f"/admin/recoveries/recoveryrequest/{asked['id']}/review/")
    assert asked["checkpoint"]["change_id"] == "chg-9"
    recovery = RecoveryRequest.objects.get(pk=asked["id"])
    assert recovery.agent_name == agent.name

    recovery_request_approve(recovery_id=asked["id"], user=people.approver)
    done = poll_recovery_status(mcp_client, token, asked["id"])

    result = done["result"]
    assert done["status"] == "succeeded"
    assert result["ok"] is True
    assert result["encoding"] == "utf-8"
    assert result["content"].encode() == old
    assert result["sha256"] == hashlib.sha256(old).hexdigest()
    assert result["size"] == len(old)
    assert result["unmount"]["ok"] is True
    assert result["unmount"]["session_id"]
    # Another agent cannot read it.
    _, other = make_agent_token()
    assert run(call_tool_async(mcp_client, other, "zerto_recovery_status", {"id": asked["id"]})).is_error


def test_no_tool_lets_an_agent_approve(mcp_server, mcp_client, agent_token) -> None:
    async def names() -> list[str]:
        async with mcp_client(agent_token[1], "auto") as client:
            return [t.name for t in (await client.list_tools()).tools]

    assert not [n for n in run(names()) if "approve" in n or "deny" in n]


def test_bad_input_is_a_tool_error_and_records_nothing(
    transactional_db, mcp_server, mcp_client, sim, sites, tagged
) -> None:
    agent, token = make_agent_token()
    tagged("web01", agent_name=agent.name)
    for path in ("etc/hostname", "/etc/../shadow", ""):
        result = run(
            call_tool_async(mcp_client, token, "zerto_recover_file", {"vm": "web01", "path": path, "reason": "x"})
        )
        assert result.is_error
    assert RecoveryRequest.objects.count() == 0


def test_wait_streams_progress_until_a_large_file_is_ready_by_url(
    worker, mcp_server, mcp_client, sim, sites, people, tagged
) -> None:
    agent, token = make_agent_token()
    size = 3 * 1024 * 1024 + 17
    sim.set_file("db01", "/srv/dump.bin", size=size, seed=3)
    expected = hashlib.sha256(sim.read_file("db01", "/srv/dump.bin")).hexdigest()
    tagged("db01", agent_name=agent.name)
    progress: list[Any] = []

    async def scenario() -> Any:
        call = asyncio.create_task(
            call_tool_async(
                mcp_client,
                token,
                "zerto_recover_file",
                {"vm": "db01", "path": "/srv/dump.bin", "reason": "restore", "wait": True},
                progress,
            )
        )
        await asyncio.to_thread(wait_until, RecoveryRequest.objects.exists, 60, what="the request recorded")
        recovery = await asyncio.to_thread(RecoveryRequest.objects.get)
        await asyncio.to_thread(recovery_request_approve, recovery_id=recovery.pk, user=people.approver)
        return await call

    done = tool_ok(run(scenario()))
    assert done["status"] == "succeeded"
    assert any("waiting for a human" in (m or "") for _, _, m in progress)
    assert progress[-1][0] == progress[-1][1] == 3
    result = done["result"]
    assert result["content"] is None
    assert result["sha256"] == expected
    url = mcp_server.url + urlsplit(result["url"]).path
    got = requests.get(url, headers={"Authorization": f"Bearer {token}"}, timeout=60)
    assert got.status_code == 200
    assert hashlib.sha256(got.content).hexdigest() == expected
    _, other = make_agent_token()
    assert requests.get(url, headers={"Authorization": f"Bearer {other}"}, timeout=60).status_code == 404


def test_sessions_are_listed_everywhere_and_agents_end_only_ours(
    worker, mcp_server, mcp_client, sim, sites, people, tagged
) -> None:
    agent, token = make_agent_token()
    tagged("db01", agent_name=agent.name)
    foreign = sim.open_foreign_session("site-b", "db01", "vpg-db")
    edge = sim.open_foreign_session("site-b", "edge01", "vpg-edge")
    sim.add_fault("unmount_fail", site="site-b", count=1)
    asked = tool_ok(
        run(
            call_tool_async(
                mcp_client, token, "zerto_recover_file", {"vm": "db01", "path": "/etc/my.cnf", "reason": "x"}
            )
        )
    )
    recovery_request_approve(recovery_id=asked["id"], user=people.approver)
    done = poll_recovery_status(mcp_client, token, asked["id"])
    assert done["status"] == "succeeded"
    assert done["result"]["unmount"]["ok"] is False
    ours = done["result"]["unmount"]["session_id"]

    listed = tool_ok(run(call_tool_async(mcp_client, token, "zerto_list_flr_sessions", {})))
    by_id = {s["session_id"]: s for s in listed["sessions"]}
    assert {foreign, edge, ours} <= set(by_id)
    assert by_id[ours]["ours"] is True
    assert by_id[ours]["recovery_id"] == asked["id"]
    assert by_id[foreign]["ours"] is False
    assert by_id[foreign]["site"] == "Site B"

    refused = run(
        call_tool_async(mcp_client, token, "zerto_end_flr_session", {"session_id": foreign, "confirmed": True})
    )
    assert refused.is_error
    assert "/admin/recoveries/flrsession/live/" in refused.content[0].text
    unconfirmed = run(call_tool_async(mcp_client, token, "zerto_end_flr_session", {"session_id": ours}))
    assert unconfirmed.is_error
    assert "confirmed=true" in unconfirmed.content[0].text
    ended = tool_ok(
        run(call_tool_async(mcp_client, token, "zerto_end_flr_session", {"session_id": ours, "confirmed": True}))
    )
    assert ended["ok"] is True
    live = {s["session_id"] for s in sim.sessions("site-b") if s["status"] != "UnmountInProgress"}
    assert live == {foreign, edge}
