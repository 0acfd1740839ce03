"""The real upstream servers of tests.upstreamfixtures, driven directly by the SDK's client (mcp 2.x,
``mode="auto"``), not through the gateway: what they list, what their calls do on disk or on the
ssh host, and that a new client works once a server was killed or restarted. The gateway's own
tests build on these fixtures; a failure here is the server's or the fixture's, not the gateway's.
"""

from __future__ import annotations

import contextlib
import http.server
import os
import pwd
import signal
import subprocess
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.conformance import BEARER_PRELOAD
from tests.fixtures import wait_until
from tests.helpers import run
from tests.upstreamfixtures import NODE, UPSTREAMS, HttpUpstream, SshMcpUpstream, StdioUpstream, installed


@contextlib.asynccontextmanager
async def http_client(upstream: HttpUpstream, **kwargs: Any) -> AsyncIterator[Client]:
    async with httpx2.AsyncClient(headers=upstream.headers, timeout=30) as http:
        async with Client(streamable_http_client(upstream.url, http_client=http), mode="auto", **kwargs) as client:
            yield client


@contextlib.asynccontextmanager
async def stdio_client_of(upstream: StdioUpstream, **kwargs: Any) -> AsyncIterator[Client]:
    with (upstream.cwd / f"{upstream.name}.stderr.log").open("a") as errlog:
        async with Client(stdio_client(upstream.params(), errlog=errlog), mode="auto", **kwargs) as client:
            yield client


async def tools_of(client: Client) -> dict[str, types.Tool]:
    return {tool.name: tool for tool in (await client.list_tools()).tools}


def text(result: types.CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, types.TextContent))


def ok(result: types.CallToolResult) -> str:
    assert not result.is_error, text(result)
    return text(result)


def kill_child(upstream: StdioUpstream) -> None:
    """SIGKILL the one server a client started from ``upstream``, and wait until it is gone."""
    (pid,) = upstream.pids()
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: pid not in upstream.pids(), what=f"{upstream.name} (pid {pid}) gone")


# server-everything (the TypeScript SDK's reference server)


async def _answer_sampling(
    context: Any, params: types.CreateMessageRequestParams
) -> types.CreateMessageResult | types.ErrorData:
    asked = params.messages[0].content
    reply = f"sampled: {asked.text if isinstance(asked, types.TextContent) else asked}"
    return types.CreateMessageResult(role="assistant", content=types.TextContent(type="text", text=reply), model="t")


async def _decline(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult | types.ErrorData:
    return types.ElicitResult(action="decline")


def test_server_everything_over_stdio_calls_reports_progress_and_asks_its_client(
    everything_stdio: StdioUpstream,
) -> None:
    reported: list[tuple[float, float | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        reported.append((progress, total))

    async def todo() -> tuple[dict[str, types.Tool], list[str]]:
        async with stdio_client_of(
            everything_stdio, sampling_callback=_answer_sampling, elicitation_callback=_decline
        ) as client:
            tools = await tools_of(client)
            return tools, [
                ok(await client.call_tool("echo", {"message": "hello"})),
                ok(await client.call_tool("get-sum", {"a": 2, "b": 3})),
                ok(
                    await client.call_tool(
                        "trigger-long-running-operation", {"duration": 0.3, "steps": 3}, progress_callback=on_progress
                    )
                ),
                ok(await client.call_tool("trigger-elicitation-request", {})),
                ok(await client.call_tool("trigger-sampling-request", {"prompt": "the weather", "maxTokens": 5})),
            ]

    tools, (echo, total, long_run, elicited, sampled) = run(todo())
    assert tools["echo"].input_schema["required"] == ["message"]
    assert tools["echo"].annotations is None or tools["echo"].annotations.read_only_hint is not False
    assert set(tools["trigger-long-running-operation"].input_schema["properties"]) == {"duration", "steps"}
    # Registered only for a client that can answer them, as this one can.
    assert {"trigger-elicitation-request", "trigger-sampling-request"} <= set(tools)
    assert echo == "Echo: hello"
    assert "5" in total
    assert "completed" in long_run
    assert reported == [(1, 3), (2, 3), (3, 3)]
    assert "declined" in elicited
    assert "sampled: Resource trigger-sampling-request context: the weather" in sampled


def test_a_killed_server_everything_child_fails_its_client_and_the_next_client_starts_another(
    everything_stdio: StdioUpstream,
) -> None:
    async def todo() -> None:
        async with stdio_client_of(everything_stdio) as client:
            assert ok(await client.call_tool("echo", {"message": "one"})) == "Echo: one"
            kill_child(everything_stdio)
            with pytest.raises(MCPError, match="Connection closed"):
                await client.call_tool("echo", {"message": "two"})
        async with stdio_client_of(everything_stdio) as client:
            assert ok(await client.call_tool("echo", {"message": "three"})) == "Echo: three"

    run(todo())


def test_server_everything_over_http_serves_until_a_restart_and_a_new_client_after_it(
    everything_http: HttpUpstream,
) -> None:
    async def call(message: str) -> str:
        async with http_client(everything_http) as client:
            assert client.protocol_version == "2025-11-25", "a server of the handshake era, with sessions"
            return ok(await client.call_tool("echo", {"message": message}))

    assert run(call("before")) == "Echo: before"
    everything_http.stop()
    with pytest.raises(httpx2.ConnectError):
        httpx2.post(everything_http.url, json={})
    everything_http.start_again()
    assert run(call("after")) == "Echo: after"
    with pytest.raises(RuntimeError, match="keeps no record"):
        everything_http.calls()


# server-filesystem


def test_server_filesystem_writes_and_reads_in_its_folder_only(filesystem_stdio: StdioUpstream) -> None:
    served = filesystem_stdio.workdir
    (served / "motd").write_text("welcome\n")

    async def todo() -> tuple[dict[str, types.Tool], list[types.CallToolResult]]:
        async with stdio_client_of(filesystem_stdio) as client:
            return await tools_of(client), [
                await client.call_tool("read_text_file", {"path": str(served / "motd")}),
                await client.call_tool("write_file", {"path": str(served / "etc" / "app.conf"), "content": "a=1\n"}),
                await client.call_tool("create_directory", {"path": str(served / "etc")}),
                await client.call_tool("write_file", {"path": str(served / "etc" / "app.conf"), "content": "a=1\n"}),
                await client.call_tool("write_file", {"path": str(served.parent / "outside"), "content": "no"}),
            ]

    tools, (read, into_missing_folder, mkdir, write, outside) = run(todo())
    assert tools["read_text_file"].annotations.read_only_hint is True
    assert tools["write_file"].annotations.read_only_hint is False
    assert set(tools["write_file"].input_schema["required"]) == {"path", "content"}
    assert ok(read) == "welcome\n"
    assert into_missing_folder.is_error
    ok(mkdir)
    ok(write)
    assert (served / "etc" / "app.conf").read_text() == "a=1\n"
    assert outside.is_error
    assert "denied" in text(outside).lower()
    assert not (served.parent / "outside").exists()


# mcp-server-git, on the SDK 1.x and on 2.x


@pytest.mark.process
@pytest.mark.parametrize("fixture", ["git_sdk1_stdio", "git_sdk2_stdio"])
def test_mcp_server_git_logs_and_commits_then_serves_a_new_client_after_a_kill(
    fixture: str, request: pytest.FixtureRequest
) -> None:
    git: StdioUpstream = request.getfixturevalue(fixture)
    repo = str(git.workdir)
    (git.workdir / "CHANGELOG").write_text("- a change\n")

    async def todo() -> tuple[dict[str, types.Tool], list[str], str]:
        async with stdio_client_of(git) as client:
            tools = await tools_of(client)
            done = [
                ok(await client.call_tool("git_log", {"repo_path": repo})),
                ok(await client.call_tool("git_add", {"repo_path": repo, "files": ["CHANGELOG"]})),
                ok(await client.call_tool("git_commit", {"repo_path": repo, "message": "second"})),
            ]
            kill_child(git)
        async with stdio_client_of(git) as client:
            return tools, done, ok(await client.call_tool("git_status", {"repo_path": repo}))

    tools, (log, _added, committed), status = run(todo())
    assert tools["git_log"].annotations.read_only_hint is True
    assert tools["git_commit"].annotations.read_only_hint is False
    assert set(tools["git_add"].input_schema["required"]) == {"repo_path", "files"}
    assert "first" in log
    assert "committed" in committed
    subjects = subprocess.run(
        ["git", "log", "--format=%s"], cwd=repo, capture_output=True, text=True, check=True
    ).stdout.split()
    assert subjects == ["second", "first"]
    assert "nothing to commit" in status


# Our servers on the SDK 1.x (stateful and stateless) and on fastmcp 4.x

HTTP_OURS = ["sdk1_stateful_http", "sdk1_stateless_http", "fastmcp_http"]


@pytest.mark.process
@pytest.mark.parametrize("fixture", HTTP_OURS)
def test_our_admin_server_writes_reads_reports_progress_and_records_each_call(
    fixture: str, request: pytest.FixtureRequest
) -> None:
    server: HttpUpstream = request.getfixturevalue(fixture)
    reported: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        reported.append(progress)

    async def todo() -> tuple[dict[str, types.Tool], list[types.CallToolResult]]:
        async with http_client(server) as client:
            return await tools_of(client), [
                await client.call_tool("write_file", {"host": "web01", "path": "/etc/motd", "content": "hello"}),
                await client.call_tool("read_file", {"host": "web01", "path": "/etc/motd"}),
                await client.call_tool("read_file", {"host": "web01", "path": "/../../escape"}),
                await client.call_tool("slow", {"seconds": 0.1}, progress_callback=on_progress),
            ]

    tools, (write, read, escape, slow) = run(todo())
    assert set(tools) == {"read_file", "write_file", "slow"}
    assert tools["read_file"].annotations.read_only_hint is True
    assert tools["write_file"].annotations.read_only_hint is False
    assert tools["write_file"].annotations.destructive_hint is True
    assert tools["write_file"].input_schema["required"] == ["host", "path", "content"]
    assert ok(write) == "wrote 5 bytes to web01:/etc/motd"
    assert server.files is not None
    assert (server.files / "web01" / "etc" / "motd").read_text() == "hello"
    assert ok(read) == "hello"
    assert escape.is_error
    assert "leaves the host's file system" in text(escape)
    assert ok(slow) == "done"
    assert reported == [1, 2, 3, 4]
    calls = server.calls()
    assert [c["tool"] for c in calls] == ["write_file", "read_file", "read_file", "slow"]
    assert {c["authorization"] for c in calls} == {server.headers["Authorization"]}
    assert [c["progress_asked"] for c in calls] == [False, False, False, True]


@pytest.mark.process
@pytest.mark.parametrize("fixture", HTTP_OURS)
def test_our_admin_server_refuses_a_request_without_its_token(fixture: str, request: pytest.FixtureRequest) -> None:
    server: HttpUpstream = request.getfixturevalue(fixture)
    resp = httpx2.post(server.url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, timeout=30)
    assert resp.status_code == 401
    assert server.calls() == []


@pytest.mark.process
@pytest.mark.parametrize("fixture", HTTP_OURS)
def test_our_admin_server_restarted_on_its_port_serves_a_new_client(
    fixture: str, request: pytest.FixtureRequest
) -> None:
    server: HttpUpstream = request.getfixturevalue(fixture)

    async def read() -> str:
        async with http_client(server) as client:
            return ok(await client.call_tool("read_file", {"host": "db01", "path": "/etc/hostname"}))

    assert server.files is not None
    (server.files / "db01" / "etc").mkdir(parents=True, exist_ok=True)
    (server.files / "db01" / "etc" / "hostname").write_text("db01\n")
    port = server.port
    assert run(read()) == "db01\n"
    server.stop()
    server.start_again()
    assert server.port == port
    assert run(read()) == "db01\n"
    sessions = [c["session"] for c in server.calls()]
    if fixture == "sdk1_stateful_http":
        assert None not in sessions
        assert sessions[0] != sessions[1], "the restart forgot the first session"
    else:
        assert sessions == [None, None]


# ssh-mcp against a real sshd


def test_ssh_mcp_runs_commands_and_uploads_on_the_ssh_host(ssh_mcp_stdio: SshMcpUpstream) -> None:
    workdir = ssh_mcp_stdio.workdir

    async def todo() -> tuple[dict[str, types.Tool], list[str]]:
        async with stdio_client_of(ssh_mcp_stdio) as client:
            return await tools_of(client), [
                ok(await client.call_tool("run-command", {"command": f"echo hi > {workdir}/greeting; id -un"})),
                ok(await client.call_tool("read-command", {"command": f"cat {workdir}/greeting"})),
                ok(await client.call_tool("sftp-upload", {"remotePath": f"{workdir}/app.conf", "content": "a=1\n"})),
                ok(await client.call_tool("sftp-download", {"remotePath": f"{workdir}/app.conf"})),
            ]

    tools, (whoami, greeting, uploaded, downloaded) = run(todo())
    assert tools["read-command"].annotations.read_only_hint is True
    assert tools["run-command"].annotations.destructive_hint is True
    assert tools["sftp-upload"].annotations.destructive_hint is True
    assert set(tools["run-command"].input_schema["required"]) == {"command"}
    assert whoami.strip() == ssh_mcp_stdio.host.user
    assert greeting == "hi\n"
    assert "Uploaded 4 bytes" in uploaded
    assert downloaded == "a=1\n"
    owner = ssh_mcp_stdio.host.user
    for name in ("greeting", "app.conf"):
        assert _owner(workdir / name) == owner, "written by the ssh login, on the host"


def _owner(path: Path) -> str:
    return pwd.getpwuid(path.stat().st_uid).pw_name


def test_ssh_mcp_reaches_the_host_again_after_sshd_restarts(ssh_mcp_stdio: SshMcpUpstream) -> None:
    (ssh_mcp_stdio.workdir / "marker").write_text("")

    async def listing() -> str:
        async with stdio_client_of(ssh_mcp_stdio) as client:
            return ok(await client.call_tool("read-command", {"command": f"ls {ssh_mcp_stdio.workdir}"}))

    assert "marker" in run(listing())
    ssh_mcp_stdio.host.stop()

    async def refused() -> types.CallToolResult:
        async with stdio_client_of(ssh_mcp_stdio) as client:
            return await client.call_tool("read-command", {"command": "ls /"})

    down = run(refused())
    assert down.is_error, "no host to reach"
    ssh_mcp_stdio.host.start_again()
    assert "marker" in run(listing())


# The conformance runner's preload (tests/upstreams/bearer_preload.mjs)

_THREE_CLIENTS = """
import http from "node:http";
import { request } from "undici";

const viaHttp = (url, options) =>
  new Promise((resolve, reject) => {
    const req = options ? http.request(url, options) : http.request(url);
    req.on("response", (res) => res.resume().on("end", resolve)).on("error", reject).end();
  });
for (const base of [process.env.TARGET, process.env.OTHER]) {
  await (await fetch(`${base}/fetch`)).text();
  await (await fetch(`${base}/fetch-own`, { headers: { Authorization: "Bearer its-own" } })).text();
  await (await request(`${base}/undici`)).body.text();
  await viaHttp(`${base}/http`);
  const { hostname, port } = new URL(base);
  await viaHttp({ hostname, port, path: "/http-options", method: "GET" });
}
"""


class _Seen(http.server.BaseHTTPRequestHandler):
    seen: list[tuple[int, str, str | None]] = []

    def do_GET(self) -> None:
        self.seen.append((int(self.connection.getsockname()[1]), self.path, self.headers.get("Authorization")))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.mark.process
def test_the_conformance_preload_adds_the_token_for_its_target_origin_only() -> None:
    installed(NODE)
    _Seen.seen.clear()
    servers = [http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Seen) for _ in range(2)]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    target, other = (f"http://127.0.0.1:{s.server_address[1]}" for s in servers)
    try:
        done = subprocess.run(
            [str(NODE), "--import", BEARER_PRELOAD.as_uri(), "--input-type=module", "-e", _THREE_CLIENTS],
            cwd=UPSTREAMS,
            env={"MCP_BEARER_URL": f"{target}/mcp", "MCP_BEARER_TOKEN": "t0ken", "TARGET": target, "OTHER": other},
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        for server in servers:
            server.shutdown()
    assert done.returncode == 0, done.stderr
    by_port = {
        port: {path: auth for p, path, auth in _Seen.seen if p == port} for port in {p for p, _, _ in _Seen.seen}
    }
    paths = ["/fetch", "/fetch-own", "/undici", "/http", "/http-options"]
    assert by_port[servers[0].server_address[1]] == dict(
        zip(paths, ["Bearer t0ken", "Bearer its-own", "Bearer t0ken", "Bearer t0ken", "Bearer t0ken"], strict=True)
    )
    assert by_port[servers[1].server_address[1]] == dict(
        zip(paths, [None, "Bearer its-own", None, None, None], strict=True)
    )
