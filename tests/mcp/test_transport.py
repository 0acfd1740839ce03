"""/mcp over real HTTP: uvicorn with 2 workers, the SDK's own client in both protocol eras."""

from __future__ import annotations

import asyncio
import json
import subprocess
from typing import Any

import pytest

from rewind.models import AuditEvent
from tests.helpers import find_protection_over_mcp, run

MODES = ["legacy", "2026-07-28", "auto"]


@pytest.mark.parametrize("mode", MODES)
def test_it_finds_protection_in_both_protocol_eras(
    mode: str, mcp_sites: Any, agent_token: Any, mcp_client: Any
) -> None:
    _, token = agent_token
    # Several calls, so both uvicorn workers serve some without sticky sessions.
    for _ in range(4):
        version, result = run(find_protection_over_mcp(mcp_client, token, mode, "web01"))
        assert not result.is_error, result.content
        assert result.structured_content["vm_name"] == "web01"
    expected = {"legacy": ("2025-11-25", "2025-06-18"), "2026-07-28": ("2026-07-28",), "auto": ("2026-07-28",)}[mode]
    assert version in expected


def test_it_lists_both_vpgs_of_a_vm_once_though_two_sites_list_it(
    sim: Any, mcp_sites: Any, agent_token: Any, mcp_client: Any
) -> None:
    _, token = agent_token
    _, result = run(find_protection_over_mcp(mcp_client, token, "auto", "web01"))
    out = result.structured_content
    assert out["vm_identifier"] == sim.vm("web01")["identifier"]
    assert sorted(v["name"] for v in out["vpgs"]) == ["vpg-web", "vpg-web-dr"]
    web = next(v for v in out["vpgs"] if v["name"] == "vpg-web")
    assert web["protected_site"] == {
        "identifier": mcp_sites["Site A"].identifier,
        "name": "Site A",
        "type": "VCenter",
        "configured_here": True,
    }
    assert web["recovery_site"]["name"] == "Site B"
    assert web["recovery_site"]["configured_here"] is True
    assert web["status_name"] == "MeetingSLA"
    assert web["flr_enabled"] is True
    assert web["can_insert_checkpoint"] is True
    assert web["cannot_insert_reason"] is None


def test_it_describes_the_tool_with_an_output_schema_and_read_only_hints(
    mcp_sites: Any, agent_token: Any, mcp_client: Any
) -> None:
    async def tools() -> Any:
        async with mcp_client(agent_token[1], "auto") as client:
            return client.instructions, (await client.list_tools()).tools

    instructions, listed = run(tools())
    tool = next(t for t in listed if t.name == "zerto_find_protection")
    assert tool.annotations.read_only_hint is True
    assert tool.annotations.destructive_hint is False
    assert "vpgs" in tool.output_schema["properties"]
    assert "zerto_guard_before_mutate" in instructions
    assert "zerto_recover_file" in instructions


def test_it_answers_an_unknown_vm_with_a_tool_error(mcp_sites: Any, agent_token: Any, mcp_client: Any) -> None:
    _, result = run(find_protection_over_mcp(mcp_client, agent_token[1], "legacy", "no-such-vm"))
    assert result.is_error
    assert "no protected VM matches 'no-such-vm'" in result.content[0].text


def test_it_lists_the_candidates_of_an_ambiguous_name(
    sim: Any, mcp_sites: Any, agent_token: Any, mcp_client: Any
) -> None:
    _, result = run(find_protection_over_mcp(mcp_client, agent_token[1], "2026-07-28", "dup01"))
    assert result.is_error
    text = result.content[0].text
    assert "matches 2 VMs" in text
    state = sim.control("GET", "state")
    assert state  # the simulator answers; identifiers below come from the VPGs' VM rows
    assert text.count("dup01 (") == 2
    assert "Site A" in text


def test_it_audits_every_tool_call_with_one_request_id(mcp_sites: Any, agent_token: Any, mcp_client: Any) -> None:
    agent, token = agent_token
    run(find_protection_over_mcp(mcp_client, token, "auto", "db01"))
    run(find_protection_over_mcp(mcp_client, token, "auto", "nope-vm"))
    events = list(AuditEvent.objects.filter(action="mcp.tool.called", actor=agent.name).order_by("seq"))
    assert [e.data["outcome"] for e in events] == ["ok", "error"]
    ok, failed = events
    assert ok.actor_type == AuditEvent.ActorType.AGENT
    assert ok.data["tool"] == "zerto_find_protection"
    assert ok.data["arguments"] == {"vm": "db01"}
    assert isinstance(ok.data["duration_ms"], (int, float))
    assert ok.request_id
    assert failed.request_id
    assert ok.request_id != failed.request_id
    assert "nope-vm" in failed.data["error"]


def test_it_masks_secrets_in_audited_arguments(mcp_sites: Any, agent_token: Any, mcp_client: Any) -> None:
    agent, token = agent_token

    async def call() -> Any:
        async with mcp_client(token, "auto") as client:
            return await client.call_tool("zerto_find_protection", {"vm": token})

    result = run(call())
    event = AuditEvent.objects.filter(action="mcp.tool.called", actor=agent.name).latest("seq")
    assert token not in json.dumps(event.data)
    assert result.is_error
    assert token not in result.content[0].text  # nor in the error the agent reads


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_it_serves_the_typescript_sdk_client(
    mode: str, node_mcp_client: Any, mcp_server: Any, mcp_sites: Any, agent_token: Any
) -> None:
    done = subprocess.run(
        ["node", "client_v2.mjs", mcp_server.mcp_url, agent_token[1], mode, "app01"],
        cwd=node_mcp_client,
        capture_output=True,
        text=True,
        timeout=60,
    )
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert "error" not in out, out
    assert out["protocolVersion"] == ("2026-07-28" if mode == "auto" else "2025-11-25")
    tool = next(t for t in out["tools"] if t["name"] == "zerto_find_protection")
    assert tool["readOnlyHint"] is True
    assert tool["hasOutputSchema"] is True
    assert out["isError"] is False
    assert sorted(v["name"] for v in out["structuredContent"]["vpgs"]) == ["vpg-app-1", "vpg-app-2", "vpg-app-3"]


def test_concurrent_calls_keep_the_audit_chain_intact(mcp_sites: Any, agent_token: Any, mcp_client: Any) -> None:
    from rewind.audit import verify_chain

    agent, token = agent_token

    async def many() -> list[Any]:
        async def one(i: int) -> Any:
            async with mcp_client(token, "2026-07-28") as client:
                return await client.call_tool("zerto_find_protection", {"vm": ["web01", "db01", "app01"][i % 3]})

        return await asyncio.gather(*(one(i) for i in range(24)))

    results = run(many())
    assert not any(r.is_error for r in results)
    assert AuditEvent.objects.filter(action="mcp.tool.called", actor=agent.name).count() == 24
    checked, problem = verify_chain()
    assert problem is None
    assert checked >= 24


def test_it_answers_a_2025_06_18_stateless_call(mcp_server: Any, mcp_sites: Any, agent_token: Any) -> None:
    from tests.helpers import call_body, post, rpc_result

    resp = post(mcp_server.mcp_url, call_body("win01"), agent_token[1], **{"MCP-Protocol-Version": "2025-06-18"})
    assert resp.status_code == 200
    assert rpc_result(resp)["result"]["structuredContent"]["vpgs"][0]["name"] == "vpg-win"


def test_the_zvm_sees_the_request_id_of_the_audited_call(
    transactional_db: None, agent_token: Any, mcp_client: Any
) -> None:
    from rewind.audit import Actor
    from rewind.sites import site_create
    from tests.localzvm import serve

    agent, token = agent_token
    row = {
        "VmIdentifier": "srv.vm-7",
        "VmName": "solo07",
        "VpgIdentifier": "vpg-7",
        "VpgName": "vpg-solo",
        "Status": 1,
        "SubStatus": 0,
        "ProtectedSite": {"identifier": "site-x", "type": "LocalSiteApi"},
        "RecoverySite": {"identifier": "site-y", "type": "PeerSiteApi"},
    }
    for zvm in serve():
        zvm.routes[("GET", "/v1/vms")] = (200, [row])
        zvm.routes[("GET", "/v1/localsite")] = (
            200,
            {"SiteIdentifier": "site-x", "SiteName": "X", "SiteType": "VCenter"},
        )
        zvm.routes[("GET", "/v1/peersites")] = (200, [])
        zvm.routes[("GET", "/v1/vpgs/statuses")] = (200, ["Initializing", "MeetingSLA"])
        zvm.routes[("GET", "/v1/vpgs/substatuses")] = (200, ["None"])
        site_create(actor=Actor.system("tests"), name="X", base_url=zvm.url, username="u", password="p")
        _, result = run(find_protection_over_mcp(mcp_client, token, "auto", "solo07"))
        assert not result.is_error, result.content
        event = AuditEvent.objects.get(action="mcp.tool.called", actor=agent.name)
        seen = {s.headers.get("X-Request-ID") for s in zvm.seen if "/v1/" in s.path}
        assert seen == {event.request_id}


def test_a_client_that_hangs_up_mid_call_has_it_cancelled_and_audited_so(
    sim: Any, mcp_server: Any, mcp_sites: Any, agent_token: Any
) -> None:
    # A 2026-07-28 checkpoint call that waits (the ZVM lists no checkpoint, no worker runs the guard):
    # the client gives up after 2 s and closes its connection, the wire's cancellation. The
    # server cancels the call there and then, and its audit row says so.
    import httpx2

    from tests.fixtures import wait_until

    sim.add_fault("checkpoint_listing_delay", seconds=300)
    agent, token = agent_token
    arguments = {"vm": "web01", "action": "patch", "change_id": "hangs-up", "timeout_s": 240}
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "zerto_create_tagged_checkpoint", "arguments": arguments, "_meta": meta},
    }
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tools/call",
        "Mcp-Name": "zerto_create_tagged_checkpoint",
        "Authorization": f"Bearer {token}",
    }
    with pytest.raises(httpx2.ReadTimeout):
        httpx2.post(mcp_server.mcp_url, content=json.dumps(body), headers=headers, timeout=httpx2.Timeout(30, read=2.0))

    def audited() -> AuditEvent | None:
        rows = AuditEvent.objects.filter(action="mcp.tool.called", actor=agent.name)
        return next((r for r in rows if r.data["tool"] == "zerto_create_tagged_checkpoint"), None)

    event = wait_until(audited, 30, what="the hung-up call's audit row")
    assert event.data["outcome"] == "cancelled", event.data
    assert event.data["duration_ms"] < 60_000, "cancelled when the client left, not at the guard's timeout"
