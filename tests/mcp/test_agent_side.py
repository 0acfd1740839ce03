"""What an agent sees of /mcp: tools that explain themselves, only what exists advertised, clear refusals."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import httpx2
import pytest

from rewind import __version__
from tests.helpers import LEGACY, post, rpc_result, run, tool_text

MODERN = "2026-07-28"
REPO = Path(__file__).resolve().parents[2]


async def _session(mcp_client: Any, token: str, mode: str, work: Any) -> Any:
    async with mcp_client(token, mode) as client:
        return await work(client)


def _with_client(mcp_client: Any, token: str, mode: str, work: Any) -> Any:
    return run(_session(mcp_client, token, mode, work))


def test_the_version_is_the_one_of_pyproject() -> None:
    assert __version__ == tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


@pytest.mark.parametrize("mode", ["legacy", "auto"])  # auto: server/discover, which carries serverInfo
def test_both_eras_advertise_the_same_capabilities_and_the_version(
    mode: str, mcp_client: Any, agent_token: Any
) -> None:
    async def work(client: Any) -> Any:
        return client.protocol_version, client.server_info, client.server_capabilities

    version, info, caps = _with_client(mcp_client, agent_token[1], mode, work)
    assert (version == MODERN) == (mode == "auto")
    assert info.name == "zerto-rewind"
    assert info.version == __version__
    # Only what exists (tools, the skill as a prompt and a resource), and no change notifications:
    # the lists never change, and a stateless server has no stream to send them on.
    assert set(caps.model_dump(exclude_none=True)) == {"tools", "prompts", "resources"}
    assert caps.tools.list_changed is False
    assert caps.prompts.list_changed is False
    assert caps.resources.list_changed is False
    assert caps.resources.subscribe is False


@pytest.mark.parametrize("mode", ["legacy", MODERN])
def test_the_advertised_prompt_and_resource_exist(mode: str, mcp_client: Any, agent_token: Any) -> None:
    async def work(client: Any) -> Any:
        prompts = (await client.list_prompts()).prompts
        prompt = await client.get_prompt("zerto-rewind")
        resources = (await client.list_resources()).resources
        read = await client.read_resource(str(resources[0].uri))
        return prompts, prompt, resources, read

    prompts, prompt, resources, read = _with_client(mcp_client, agent_token[1], mode, work)
    assert [p.name for p in prompts] == ["zerto-rewind"]
    assert prompts[0].description
    body = prompt.messages[0].content.text
    assert body.startswith("# zerto-rewind")
    assert "zerto_guard_before_mutate" in body
    assert "---" not in body[:5]
    assert [str(r.uri) for r in resources] == ["zerto-rewind://skill/SKILL.md"]
    assert read.contents[0].text == (REPO / "skills" / "zerto-rewind" / "SKILL.md").read_text(encoding="utf-8")


def test_every_tool_has_a_title_and_every_argument_a_description(mcp_client: Any, agent_token: Any) -> None:
    async def work(client: Any) -> Any:
        return (await client.list_tools()).tools

    tools = _with_client(mcp_client, agent_token[1], "auto", work)
    assert len(tools) >= 10
    for tool in tools:
        assert tool.title, tool.name
        assert tool.annotations.title == tool.title, tool.name
        for name, prop in tool.input_schema.get("properties", {}).items():
            description = prop.get("description") or ""
            assert len(description) > 20, f"{tool.name}.{name} has no description"
            assert "e.g." in description or "JSON" in description, f"{tool.name}.{name}: no format or example"
    hints = {t.name: t.annotations for t in tools}
    for name in ("zerto_guard_before_mutate", "zerto_create_tagged_checkpoint", "zerto_recover_file"):
        assert hints[name].idempotent_hint is False, name
        assert hints[name].read_only_hint is False, name
    for name in (
        "zerto_find_protection",
        "zerto_checkpoint_status",
        "zerto_recovery_status",
        "zerto_list_flr_sessions",
        "zerto_list_mutating_tools",
    ):
        assert hints[name].read_only_hint is True, name
        assert hints[name].destructive_hint is False, name
    assert hints["zerto_end_flr_session"].destructive_hint is True


@pytest.mark.parametrize("mode", ["legacy", MODERN])
def test_a_wrong_argument_is_one_plain_sentence(mode: str, mcp_client: Any, agent_token: Any) -> None:
    async def work(client: Any) -> Any:
        wrong = await client.call_tool("zerto_end_flr_session", {"session_id": "s-1", "confirmed": "yes"})
        two = await client.call_tool("zerto_create_tagged_checkpoint", {"action": 7, "vm": "web01", "timeout_s": 1e9})
        return wrong, two

    wrong, two = _with_client(mcp_client, agent_token[1], mode, work)
    assert wrong.is_error
    text = wrong.content[0].text
    assert text.startswith("confirmed: must be JSON true (got the string 'yes')")
    assert text.count(".") >= 1
    assert "\n" not in text
    assert "pydantic" not in text
    assert "validation error" not in text.lower()
    assert "input_value" not in text
    assert two.is_error
    text = two.content[0].text
    assert "action: must be a JSON string (got the number 7)" in text
    assert "timeout_s: must be at most 3600 (got the number 1000000000.0)" in text


@pytest.mark.parametrize("mode", ["legacy", MODERN])
def test_an_unknown_tool_is_a_tool_error_naming_the_tools_and_an_unknown_prompt_is_invalid_params(
    mode: str, mcp_client: Any, agent_token: Any
) -> None:
    """An SDK client raises a JSON-RPC error instead of handing it to the model; a tool error it hands over,
    so the model reads which tools there are and tries one of them."""
    from mcp.shared.exceptions import MCPError

    # At 2026-07-28 the tool's name also goes in the Mcp-Name header: uvicorn drops a 64 KiB one.
    huge_name = "t" * 65536 if mode == "legacy" else "zerto_no_such_tool"

    async def work(client: Any) -> list[Any]:
        answers: list[Any] = [await client.call_tool("zerto_find_protektion", {"vm": "web01"})]
        answers.append(await client.call_tool(huge_name, {}))
        try:
            await client.get_prompt("no-such-prompt")
        except MCPError as exc:
            answers.append(exc.error)
        else:
            answers.append(None)
        return answers

    unknown, huge, prompt = _with_client(mcp_client, agent_token[1], mode, work)
    assert unknown.is_error
    text = tool_text(unknown)
    assert "unknown tool 'zerto_find_protektion'" in text
    assert "did you mean 'zerto_find_protection'?" in text
    assert "zerto_guard_before_mutate" in text  # the tools it may call are named
    assert huge.is_error
    if mode == "legacy":
        assert "65536 characters" in tool_text(huge)
        assert len(tool_text(huge)) < 2000
    assert prompt.code == -32602
    assert "unknown prompt 'no-such-prompt'" in prompt.message


@pytest.mark.parametrize("version", [None, LEGACY, "2025-06-18", MODERN])
def test_only_post_is_allowed_and_every_405_says_so(version: str | None, mcp_server: Any, agent_token: Any) -> None:
    headers = {"Authorization": f"Bearer {agent_token[1]}", "Accept": "application/json, text/event-stream"}
    if version:
        headers["MCP-Protocol-Version"] = version
    for method in ("GET", "DELETE", "PUT", "PATCH", "OPTIONS"):
        resp = httpx2.request(method, mcp_server.mcp_url, headers=headers, timeout=10)
        assert resp.status_code == 405, (method, resp.status_code, resp.text)
        assert resp.headers["allow"] == "POST"
        assert resp.json()["error"]["message"].startswith(f"method {method} not allowed")


def test_a_huge_method_name_is_answered_with_an_excerpt(mcp_server: Any, agent_token: Any) -> None:
    for version in (LEGACY, MODERN):
        body = {"jsonrpc": "2.0", "id": 5, "method": "m" * 65536, "params": {}}
        resp = post(mcp_server.mcp_url, body, agent_token[1], **{"MCP-Protocol-Version": version})
        assert len(resp.content) < 500, resp.content[:300]
        error = resp.json()["error"]
        assert error["code"] == -32601
        assert "65536 characters" in error["message"]
        assert resp.json()["id"] == 5


def test_a_huge_argument_is_not_echoed_in_a_validation_error(mcp_server: Any, mcp_sites: Any, agent_token: Any) -> None:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": "zerto_end_flr_session",
            "arguments": {"session_id": "x" * 100_000, "confirmed": "y" * 100_000},
        },
    }
    resp = post(mcp_server.mcp_url, body, agent_token[1])
    result = rpc_result(resp)["result"]
    assert result["isError"] is True
    assert len(json.dumps(result)) < 1000
