"""The guard and catalog tools end to end: MCP client → uvicorn → services → Celery worker → simulator."""

from __future__ import annotations

from typing import Any

from catalog.models import MutatingTool, ToolSighting
from rewind.models import AuditEvent, ChangeGuard
from tests.helpers import call_tool, tagged_rows


def test_it_guards_a_listed_tool_and_streams_progress(
    sim: Any, mcp_sites: Any, agent_token: Any, mcp_client: Any, worker: Any
) -> None:
    sim.add_fault("checkpoint_listing_delay", seconds=1)
    agent, token = agent_token
    progress: list[Any] = []
    result = call_tool(
        mcp_client,
        token,
        "zerto_guard_before_mutate",
        {
            "tool": "ssh/exec",
            "arguments": {"host": "root@web01", "command": "vi /etc/nginx/nginx.conf"},
            "action": "edit nginx.conf",
            "change_id": "CHG-7",
        },
        progress,
    )
    assert not result.is_error, result.content
    out = result.structured_content
    assert out["ok"] is True
    assert out["guarded"] is True
    assert out["status"] == "ok"
    assert out["catalog_entry"] == "ssh/exec"
    assert out["change_id"] == "CHG-7"
    assert out["tag"].startswith(f"ai:{agent.name} | edit nginx.conf | vm=web01 | change=CHG-7 | ")
    assert [v["status"] for v in out["vpgs"]] == ["listed", "listed"]
    assert all(v["checkpoint_identifier"] and v["checkpoint_timestamp"] for v in out["vpgs"])
    assert progress
    assert progress[-1][:2] == (2, 2)
    values = [p[0] for p in progress]
    assert values == sorted(set(values)), f"progress must increase with every notification: {values}"
    assert len(tagged_rows(sim, "site-a", "vpg-web", out["tag"])) == 1


def test_it_passes_an_unlisted_tool_through_and_records_the_sighting(
    mcp_sites: Any, agent_token: Any, mcp_client: Any
) -> None:
    agent, token = agent_token
    result = call_tool(
        mcp_client,
        token,
        "zerto_guard_before_mutate",
        {"tool": "fs/read_file", "arguments": {"path": "/etc/hosts"}, "action": "read hosts"},
    )
    out = result.structured_content
    assert out["ok"] is True
    assert out["guarded"] is False
    assert out["status"] == "pass_through"
    sighting = ToolSighting.objects.get(tool="fs/read_file")
    assert sighting.count == 1
    assert sighting.agents == [agent.name]
    assert sighting.argument_names == ["path"]
    assert AuditEvent.objects.filter(action="guard.pass_through", actor=agent.name).count() == 1


def test_a_listed_tool_without_its_vm_argument_is_an_error(mcp_sites: Any, agent_token: Any, mcp_client: Any) -> None:
    result = call_tool(
        mcp_client,
        agent_token[1],
        "zerto_guard_before_mutate",
        {"tool": "winrm/run_ps", "arguments": {"script": "Set-Content ..."}, "action": "edit web.config"},
    )
    assert result.is_error
    text = result.content[0].text
    assert "winrm/run_ps" in text
    assert "'host'" in text
    assert not ChangeGuard.objects.exists()


def test_it_answers_at_once_without_wait_and_the_status_tool_follows(
    sim: Any, mcp_sites: Any, agent_token: Any, mcp_client: Any, worker: Any
) -> None:
    sim.add_fault("checkpoint_listing_delay", seconds=1)
    token = agent_token[1]
    pending = call_tool(
        mcp_client, token, "zerto_create_tagged_checkpoint", {"vm": "db01", "action": "edit my.cnf", "wait": False}
    )
    out = pending.structured_content
    # Not finished is not an error (the agent was told to poll), but it says not to proceed yet.
    assert not pending.is_error
    assert pending.content[0].text.startswith("Do not proceed yet:")
    assert out["ok"] is False
    assert out["finished"] is False
    assert out["id"]
    assert "do not make the change" in out["must_not_proceed"]
    for _ in range(100):
        status = call_tool(mcp_client, token, "zerto_checkpoint_status", {"id": out["id"]}).structured_content
        if status["finished"]:
            break
    assert status["ok"] is True
    assert status["listed"] == status["total"] == 1


def test_it_refuses_a_vm_protected_from_aws(mcp_sites: Any, agent_token: Any, mcp_client: Any) -> None:
    result = call_tool(
        mcp_client, agent_token[1], "zerto_create_tagged_checkpoint", {"vm": "cloud01", "action": "edit"}
    )
    assert result.is_error
    out = result.structured_content
    assert out["ok"] is False
    assert out["status"] == "refused"
    assert "AWS" in out["must_not_proceed"]
    assert out["vpgs"][0]["status"] == "refused"


def test_a_guard_that_is_not_ok_is_an_error_that_says_not_to_proceed(
    mcp_sites: Any, agent_token: Any, mcp_client: Any
) -> None:
    result = call_tool(
        mcp_client,
        agent_token[1],
        "zerto_guard_before_mutate",
        {
            "tool": "ssh/exec",
            "arguments": {"host": "cloud01", "command": "rm -rf /srv/cache"},
            "action": "clear the cache",
        },
    )
    assert result.is_error
    text = result.content[0].text
    assert text.startswith("DO NOT PROCEED: do not make the change to cloud01.")
    assert "AWS" in text.splitlines()[0]
    # The structured answer stays attached, for clients that read it.
    out = result.structured_content
    assert out["ok"] is False
    assert out["finished"] is True
    assert "AWS" in out["must_not_proceed"]


def test_an_agent_grows_and_reads_the_catalog(mcp_sites: Any, agent_token: Any, mcp_client: Any) -> None:
    agent, token = agent_token
    added = call_tool(
        mcp_client,
        token,
        "zerto_add_mutating_tool",
        {"tool": "Docker/*", "vm_arg": "host", "description": "Docker commands on a host", "platform": "linux"},
    ).structured_content
    assert added["tool"] == "docker/*"
    assert added["added_by"] == agent.name
    assert added["added_by_kind"] == "agent"
    listing = call_tool(mcp_client, token, "zerto_list_mutating_tools", {}).structured_content
    assert "docker/*" in [t["tool"] for t in listing["tools"]]
    assert "ssh/exec" in [t["tool"] for t in listing["tools"]]
    assert MutatingTool.objects.get(pattern="docker/*").added_by == agent.name
    again = call_tool(
        mcp_client, token, "zerto_add_mutating_tool", {"tool": "docker/*", "vm_arg": "host", "description": "again"}
    )
    assert again.is_error
    assert "already has an entry" in again.content[0].text
