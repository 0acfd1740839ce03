"""The gateway in front of the MCP servers people run, none of them ours to change (tests/upstreamfixtures.py).

For each: an agent with a real MCP client, through the real /mcp (uvicorn, two worker processes),
lists the upstream's tools, makes a read-only call (passed, no guard), and a call that changes
something, guarded on the simulator's web01 before it is forwarded; the upstream is restarted (an
HTTP server) or its child killed (a stdio one), and the next call is served again; and while it is
down a call to guard is refused before any checkpoint is spent on it.

The servers: @modelcontextprotocol/server-everything (TypeScript SDK, stdio and streamable HTTP),
@modelcontextprotocol/server-filesystem (stdio), mcp-server-git on the Python SDK 1.x and 2.x (stdio),
a server on the newest Python SDK 1.x over stateful and over stateless streamable HTTP, one on
fastmcp 4.x, and ssh-mcp reaching a real OpenSSH server. A server that serves one machine is added
as a per-host upstream (its host VM web01), so its tools are guarded on that VM whatever their
arguments; ours take the machine as an argument and are guarded by the policy that finds it.
"""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from rewind.approvals.jcs import digest
from rewind.approvals.models import HeldCall
from rewind.approvals.services import held_call_approve
from rewind.audit import Actor
from rewind.gateway.models import GatewayCall, Upstream, UpstreamTool
from rewind.gateway.services import upstream_create, upstream_tool_set_policy
from rewind.models import AuditEvent, ChangeGuard
from tests.fixtures import make_user, wait_until
from tests.gateway.support import listed_and_approved
from tests.helpers import run, tool_text
from tests.upstreamfixtures import HttpUpstream, StdioUpstream

pytestmark = [pytest.mark.timeout(300), pytest.mark.process]
ADMIN = Actor.user("admin")
VM = "web01"


@dataclass(frozen=True)
class Case:
    fixture: str
    name: str  # the upstream's name here: its tools are <name>__<tool>
    read: Callable[[Any], tuple[str, dict[str, Any]]]  # a read-only call
    write: Callable[[Any], tuple[str, dict[str, Any]]]  # a call that changes something
    written: Callable[[Any], bool]  # whether the write's effect is there
    per_host: bool = True  # serves one machine: added with host VM web01
    stop_for_good: Callable[[Any], None] | None = None  # makes a stdio command unable to start
    extra: dict[str, Any] = field(default_factory=dict)


def _fs_write(up: StdioUpstream) -> tuple[str, dict[str, Any]]:
    return "write_file", {"path": str(up.workdir / "app.conf"), "content": "a=1\n"}


def _git_write(up: StdioUpstream) -> tuple[str, dict[str, Any]]:
    (up.workdir / "CHANGELOG").write_text("one\n", encoding="utf-8")
    return "git_add", {"repo_path": str(up.workdir), "files": ["CHANGELOG"]}


def _git_staged(up: StdioUpstream) -> bool:
    import subprocess

    out = subprocess.run(["git", "diff", "--cached", "--name-only"], cwd=up.workdir, capture_output=True, text=True)
    return "CHANGELOG" in out.stdout


def _ssh_write(up: StdioUpstream) -> tuple[str, dict[str, Any]]:
    return "run-command", {"command": f"echo changed > {up.workdir}/through-gateway"}


def _ssh_written(up: StdioUpstream) -> bool:
    return (up.workdir / "through-gateway").exists()


def _ours_read(up: HttpUpstream) -> tuple[str, dict[str, Any]]:
    return "read_file", {"host": VM, "path": "/etc/motd"}


def _ours_write(up: HttpUpstream) -> tuple[str, dict[str, Any]]:
    return "write_file", {"host": VM, "path": "/etc/motd", "content": "changed\n"}


def _ours_written(up: HttpUpstream) -> bool:
    assert up.files is not None
    return (up.files / VM / "etc" / "motd").read_text(encoding="utf-8") == "changed\n"


def _everything_read(up: Any) -> tuple[str, dict[str, Any]]:
    return "get-sum", {"a": 2, "b": 3}


def _everything_write(up: Any) -> tuple[str, dict[str, Any]]:
    return "toggle-simulated-logging", {}


CASES = [
    Case("everything_stdio", "everything", _everything_read, _everything_write, lambda up: True),
    Case("everything_http", "everythinghttp", _everything_read, _everything_write, lambda up: True),
    Case(
        "filesystem_stdio",
        "fs",
        lambda up: ("list_directory", {"path": str(up.workdir)}),
        _fs_write,
        lambda up: (up.workdir / "app.conf").read_text(encoding="utf-8") == "a=1\n",
        stop_for_good=lambda up: shutil.rmtree(up.workdir),  # the folder it serves is gone: it exits
    ),
    Case(
        "git_sdk1_stdio",
        "git1",
        lambda up: ("git_status", {"repo_path": str(up.workdir)}),
        _git_write,
        _git_staged,
    ),
    Case(
        "git_sdk2_stdio",
        "git2",
        lambda up: ("git_status", {"repo_path": str(up.workdir)}),
        _git_write,
        _git_staged,
    ),
    Case("sdk1_stateful_http", "sdk1", _ours_read, _ours_write, _ours_written, per_host=False),
    Case("sdk1_stateless_http", "sdk1sl", _ours_read, _ours_write, _ours_written, per_host=False),
    Case("fastmcp_http", "fastmcp", _ours_read, _ours_write, _ours_written, per_host=False),
    Case(
        "ssh_mcp_stdio",
        "ssh",
        lambda up: ("read-command", {"command": f"ls {up.workdir}"}),
        _ssh_write,
        _ssh_written,
        stop_for_good=lambda up: Path(up.command[-1].split("=", 1)[1]).unlink(),  # its config is gone
    ),
]


def _add(case: Case, up: HttpUpstream | StdioUpstream) -> Upstream:
    fields: dict[str, Any] = {"host_vm": VM if case.per_host else "", "connect_timeout_s": 20}
    if isinstance(up, HttpUpstream):
        upstream = upstream_create(actor=ADMIN, name=case.name, url=up.url, headers=up.headers, **fields)
    else:
        upstream = upstream_create(
            actor=ADMIN, name=case.name, transport="stdio", command=up.command, env=up.env, **fields
        )
    return listed_and_approved(upstream)


def _calls(mcp_client: Any, token: str, calls: list[tuple[str, dict[str, Any]]]) -> tuple[list[str], list[Any]]:
    async def go() -> tuple[list[str], list[Any]]:
        async with mcp_client(token, "auto") as client:
            names = [t.name for t in (await client.list_tools()).tools]
            return names, [await client.call_tool(tool, args) for tool, args in calls]

    return run(go())


def _row(result: Any) -> GatewayCall:
    return GatewayCall.objects.get(call_id=result.meta["zerto-rewind/call_id"])


def _children(command: list[str], master_pid: int) -> list[int]:
    """The processes running ``command`` that the gateway's uvicorn workers started (their parent's parent
    is the uvicorn master): what a test kills as a crash would."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            argv = proc.joinpath("cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
            if argv[-len(command) :] != command:
                continue
            parent = _ppid(int(proc.name))
            if parent and _ppid(parent) == master_pid:
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def _ppid(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("PPid:"):
            return int(line.split()[1])
    return 0


@pytest.mark.parametrize("case", CASES, ids=[c.fixture for c in CASES])
def test_the_gateway_lists_passes_guards_heals_and_refuses_while_down(
    case: Case,
    request: pytest.FixtureRequest,
    mcp_sites: Any,
    agent_token: Any,
    mcp_client: Any,
    mcp_server: Any,
    worker: Any,
) -> None:
    up = request.getfixturevalue(case.fixture)
    _add(case, up)
    _agent, token = agent_token
    read_tool, read_args = case.read(up)
    write_tool, write_args = case.write(up)
    exposed_read, exposed_write = f"{case.name}__{read_tool}", f"{case.name}__{write_tool}"

    names, (write, read) = _calls(mcp_client, token, [(exposed_write, write_args), (exposed_read, read_args)])
    assert {exposed_read, exposed_write} <= set(names)
    assert not write.is_error, tool_text(write)
    assert (_row(write).decision, _row(write).vm, _row(write).outcome) == ("guarded", VM, "ok")
    guard = write.meta["zerto-rewind/guard"]
    assert guard["ok"] is True, guard
    assert [c["status"] for c in guard["checkpoints"]] == ["listed"] * len(guard["checkpoints"]), guard
    assert guard["checkpoints"], guard
    assert case.written(up)
    assert not read.is_error, tool_text(read)
    assert (_row(read).decision, _row(read).outcome) == ("passed", "ok")

    # A restarted server (an HTTP one forgets every session), or a killed child (a stdio one), is served again.
    if isinstance(up, HttpUpstream):
        up.stop()
        up.start_again()
    else:
        wait_until(lambda: _children(up.command, mcp_server.proc.pid), 30, what="the gateway's child running")
        for pid in _children(up.command, mcp_server.proc.pid):
            os.kill(pid, signal.SIGKILL)
    _, again = _calls(mcp_client, token, [(exposed_read, read_args)] * 4)  # both workers, each its own link
    assert [r.is_error for r in again] == [False] * 4, [tool_text(r) for r in again]

    # Down: a call to guard is refused before any checkpoint is spent on it, saying why.
    if isinstance(up, HttpUpstream):
        up.stop()
    elif case.stop_for_good is not None:
        for pid in _children(up.command, mcp_server.proc.pid):
            os.kill(pid, signal.SIGKILL)
        case.stop_for_good(up)
    else:
        return  # a stdio command that always starts again is never down for long
    guards = ChangeGuard.objects.count()
    _, (down,) = _calls(mcp_client, token, [(exposed_write, write_args)])
    assert down.is_error
    assert "no checkpoint taken" in tool_text(down), tool_text(down)
    assert _row(down).outcome == "upstream_failed"
    assert ChangeGuard.objects.count() == guards


def test_a_write_to_a_real_server_held_for_a_person_runs_once_exactly_as_approved(
    filesystem_stdio: StdioUpstream, mcp_sites: Any, agent_token: Any, mcp_client: Any, mcp_server: Any, worker: Any
) -> None:
    """The hold in front of a server none of us wrote: guarded, held, approved, then forwarded once."""
    upstream = _add(next(c for c in CASES if c.fixture == "filesystem_stdio"), filesystem_stdio)
    tool = UpstreamTool.objects.get(upstream=upstream, name="write_file")
    upstream_tool_set_policy(actor=ADMIN, tool=tool, policy="approve")
    hana = make_user("hana", password="pw-hana", perms=(("rewind", "approve_heldcall"), ("rewind", "view_heldcall")))
    _agent, token = agent_token
    target = filesystem_stdio.workdir / "held.conf"
    args = {"path": str(target), "content": "approved=1\n"}
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(_calls, mcp_client, token, [("fs__write_file", args)])
        held = wait_until(lambda: HeldCall.objects.filter(state="pending").first(), 120, what="the held call")
        assert not target.exists()  # held after its checkpoints: the server has seen nothing
        assert (held.tool, held.vm, held.arguments_digest) == ("fs/write_file", VM, digest(args))
        assert held.checkpoints
        held_call_approve(held_id=held.pk, user=hana, seen_digest=held.arguments_digest)
        _, (result,) = waiting.result(timeout=180)
    assert not result.is_error, tool_text(result)
    assert target.read_text(encoding="utf-8") == "approved=1\n"
    held.refresh_from_db()
    assert (held.state, held.outcome, held.decided_by) == ("forwarded", "ok", "hana")
    assert GatewayCall.objects.filter(forwarded_at__isnull=False).count() == 1


def test_what_server_everything_asks_of_the_agent_is_refused_and_recorded(
    everything_stdio: StdioUpstream, mcp_sites: Any, agent_token: Any, mcp_client: Any
) -> None:
    """It offers its sampling and elicitation tools to a client that declares those capabilities, as the
    gateway does so that what a server asks is seen: each request is refused, and the audit log says so."""
    upstream = _add(
        Case("everything_stdio", "everything", _everything_read, _everything_write, lambda up: True), everything_stdio
    )
    _agent, token = agent_token
    calls = [
        ("everything__trigger-sampling-request", {"prompt": "the weather", "maxTokens": 5}),
        ("everything__trigger-elicitation-request", {}),
    ]
    _, (sampled, elicited) = _calls(mcp_client, token, calls)
    for result in (sampled, elicited):
        assert "refused by zerto-rewind's gateway" in tool_text(result), tool_text(result)
    asked = AuditEvent.objects.filter(action="gateway.upstream.asked", target_id=str(upstream.pk))
    assert {"sampling", "elicitation"} <= {e.data["kind"] for e in asked}
    sampling = next(e for e in asked if e.data["kind"] == "sampling")
    assert "may not ask the agent's side for sampling" in sampling.data["refused"]


def test_a_stdio_server_sees_none_of_this_services_environment(
    everything_stdio: StdioUpstream, mcp_sites: Any, agent_token: Any, mcp_client: Any
) -> None:
    """server-everything's get-env prints its whole environment: the database URL, the keys and the
    test settings of the process that started it are not there, only the SDK's safe variables and its own."""
    _add(Case("everything_stdio", "everything", _everything_read, _everything_write, lambda up: True), everything_stdio)
    _agent, token = agent_token
    _, (env,) = _calls(mcp_client, token, [("everything__get-env", {})])
    text = tool_text(env)
    assert everything_stdio.env["HOME"] in text
    for secret_name in ("DATABASE_URL", "REDIS_URL", "DJANGO_", "REWIND_", "MCP_REQUEST_STATE_KEY"):
        assert secret_name not in text
