"""The guest shell, the upstream MCP server gateway tests use: its tools over both transports,
its edits landing in the simulator's guests, its token check and its record of calls."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from tests.gateway.guestshell import _sed_expression
from tests.gateway.support import GuestShellHttp, GuestShellStdio, run_guestshell
from tests.helpers import run
from tests.simfixtures import SimHandle, SimServer

TOOLS = {"exec", "write_file", "read_file", "append_line", "slow"}
NGINX = "/etc/nginx/nginx.conf"


async def _http(url: str, headers: dict[str, str], todo: Any) -> Any:
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            return await todo(client)


async def _stdio(command: GuestShellStdio, todo: Any) -> Any:
    async with Client(stdio_client(command.params())) as client:
        return await todo(client)


async def _tools(client: Client) -> dict[str, Any]:
    return {tool.name: tool for tool in (await client.list_tools()).tools}


def _check_tools(tools: dict[str, Any]) -> None:
    assert set(tools) == TOOLS
    assert set(tools["exec"].input_schema["properties"]) == {"host", "command"}
    assert tools["exec"].input_schema["required"] == ["host", "command"]
    assert tools["exec"].description
    assert tools["exec"].annotations.read_only_hint is False
    assert tools["exec"].annotations.destructive_hint is True
    assert tools["write_file"].annotations.read_only_hint is False
    assert tools["read_file"].annotations.read_only_hint is True
    assert tools["slow"].annotations.read_only_hint is True
    assert "computer_name" in tools["append_line"].input_schema["properties"]
    assert tools["slow"].input_schema["properties"]["seconds"]["type"] == "number"


def _text(result: Any) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


def test_it_lists_its_tools_over_http(guestshell_http: GuestShellHttp) -> None:
    _check_tools(run(_http(guestshell_http.url, guestshell_http.headers, _tools)))
    assert guestshell_http.calls() == []


def test_it_lists_its_tools_over_stdio(guestshell_stdio_command: GuestShellStdio) -> None:
    _check_tools(run(_stdio(guestshell_stdio_command, _tools)))


def test_exec_over_http_breaks_a_file_in_the_guest(sim: SimHandle, guestshell_http: GuestShellHttp) -> None:
    original = sim.read_file("web01", NGINX).decode()
    assert "worker_processes" in original

    async def todo(client: Client) -> list[Any]:
        return [
            await client.call_tool(
                "exec", {"host": "root@web01", "command": f"sed -i 's/worker_processes/#broken/' {NGINX}"}
            ),
            await client.call_tool("exec", {"host": "web01", "command": f"echo 'listen 8081;' >> {NGINX}"}),
            await client.call_tool("exec", {"host": "web01", "command": f"cat {NGINX}"}),
        ]

    sed, echo, cat = run(_http(guestshell_http.url, guestshell_http.headers, todo))
    assert [sed.is_error, echo.is_error] == [False, False], (sed.content, echo.content)
    broken = sim.read_file("web01", NGINX).decode()
    assert broken == original.replace("worker_processes", "#broken", 1) + "listen 8081;\n"
    assert _text(cat) == broken
    calls = guestshell_http.calls()
    assert [c["tool"] for c in calls] == ["exec", "exec", "exec"]
    assert calls[0]["arguments"]["host"] == "root@web01"
    assert {c["authorization"] for c in calls} == {f"Bearer {guestshell_http.token}"}


def test_write_read_append_and_rm_over_stdio(sim: SimHandle, guestshell_stdio_command: GuestShellStdio) -> None:
    async def todo(client: Client) -> list[Any]:
        return [
            await client.call_tool("write_file", {"host": "web01", "path": "/etc/app.conf", "content": "a=1\n"}),
            await client.call_tool("append_line", {"computer_name": "web01", "path": "/etc/app.conf", "line": "b=2"}),
            await client.call_tool("read_file", {"host": "web01", "path": "/etc/app.conf"}),
            await client.call_tool("exec", {"host": "web01", "command": "echo hello > /tmp/x"}),
            await client.call_tool("exec", {"host": "web01", "command": "rm /etc/app.conf"}),
            await client.call_tool("exec", {"host": "web01", "command": "cat /etc/app.conf"}),
            await client.call_tool("exec", {"host": "web01", "command": "reboot"}),
        ]

    write, append, read, echo, rm, cat_missing, unknown = run(_stdio(guestshell_stdio_command, todo))
    assert [r.is_error for r in (write, append, echo, rm)] == [False] * 4
    assert _text(read) == "a=1\nb=2\n"
    assert sim.read_file("web01", "/tmp/x") == b"hello\n"
    assert cat_missing.is_error
    assert "No such file" in _text(cat_missing)
    assert unknown.is_error
    assert "command not found" in _text(unknown)
    calls = guestshell_stdio_command.calls()
    assert [c["tool"] for c in calls][:2] == ["write_file", "append_line"]
    assert all(c["authorization"] is None for c in calls)


def test_a_windows_guest_path_keeps_its_backslashes(sim: SimHandle, guestshell_http: GuestShellHttp) -> None:
    async def todo(client: Client) -> Any:
        return await client.call_tool("exec", {"host": "win01", "command": r"echo broken > C:\inetpub\web.config"})

    result = run(_http(guestshell_http.url, guestshell_http.headers, todo))
    assert not result.is_error, result.content
    assert sim.read_file("win01", r"C:\inetpub\web.config") == b"broken\n"


def test_slow_reports_progress(guestshell_http: GuestShellHttp) -> None:
    seen: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(progress)

    async def todo(client: Client) -> Any:
        return await client.call_tool("slow", {"seconds": 2.5}, progress_callback=on_progress)

    result = run(_http(guestshell_http.url, guestshell_http.headers, todo))
    assert _text(result) == "done"
    assert seen == [1.0, 2.0, 2.5]


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}])
def test_a_missing_or_wrong_token_gets_401(guestshell_http: GuestShellHttp, headers: dict[str, str]) -> None:
    resp = httpx2.post(
        guestshell_http.url,
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={**headers, "Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"},
    )
    assert resp.status_code == 401
    with pytest.raises(ExceptionGroup):  # the SDK's MCPError, inside the task group's ExceptionGroup
        run(_http(guestshell_http.url, headers, _tools))
    assert guestshell_http.calls() == []


@pytest.mark.process
def test_without_a_token_it_serves_anyone(tmp_path: Path, sim_server: SimServer, sim: SimHandle) -> None:
    with run_guestshell(tmp_path, sim_server) as server:
        assert server.token is None
        assert set(run(_http(server.url, {}, _tools))) == TOOLS


def test_a_call_with_bad_arguments_is_still_recorded(guestshell_http: GuestShellHttp) -> None:
    async def todo(client: Client) -> Any:
        return await client.call_tool("write_file", {"host": "web01"})

    result = run(_http(guestshell_http.url, guestshell_http.headers, todo))
    assert result.is_error
    assert [c["tool"] for c in guestshell_http.calls()] == ["write_file"]


def test_sed_expressions() -> None:
    assert _sed_expression("s/a/b/") == ("a", "b", False)
    assert _sed_expression("s|/etc|/opt|g") == ("/etc", "/opt", True)
    assert _sed_expression(r"s/a\/b/c/") == ("a/b", "c", False)
