"""Upstreams heal (rewind/gateway/links.py): a restarted HTTP server, a stdio command that died, one that is down.

Real upstreams (the guest shell, tests.gateway.guestshell) restarted and killed under the real
/mcp (uvicorn, two worker processes, each with its own sessions). Before: every call after an HTTP
upstream restarted failed with "Session not found", no stdio command was started again after it
died, and a guarded call to a dead upstream spent a checkpoint first.
"""

from __future__ import annotations

import os
import secrets
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from catalog.services import mutating_tool_add
from rewind.audit import Actor
from rewind.gateway.models import GatewayCall
from rewind.gateway.services import upstream_create
from rewind.models import ChangeGuard
from tests.fixtures import wait_until
from tests.gateway.support import GuestShellStdio, add_http_upstream, listed_and_approved, run_guestshell
from tests.helpers import Api, call_tool, tool_text
from tests.simfixtures import SimServer

pytestmark = [pytest.mark.timeout(300), pytest.mark.process]
NGINX = "/etc/nginx/nginx.conf"
ADMIN = Actor.user("admin")


def _read(mcp_client: Any, token: str, tool: str) -> Any:
    return call_tool(mcp_client, token, tool, {"host": "web01", "path": NGINX})


def _outcome(result: Any) -> str:
    return GatewayCall.objects.get(call_id=result.meta["zerto-rewind/call_id"]).outcome


def _assert_cut_says_it_may_have_run(
    mcp_client: Any, token: str, tool: str, received: Callable[[], list[dict[str, Any]]], kill: Callable[[], None]
) -> None:
    """A 30 s ``slow`` call whose upstream is killed once it received the call: the agent is told it
    may or may not have run."""
    cut: list[Any] = []
    slow = threading.Thread(target=lambda: cut.append(call_tool(mcp_client, token, tool, {"seconds": 30})))
    slow.start()
    wait_until(lambda: [c for c in received() if c["tool"] == "slow"], 60, what="the slow call received")
    kill()
    slow.join(60)
    assert not slow.is_alive()
    text = tool_text(cut[0])
    assert cut[0].is_error
    assert "may or may not have run" in text, text
    assert _outcome(cut[0]) == "upstream_failed"


def test_an_http_upstream_that_restarted_is_used_again_by_the_next_call(
    tmp_path: Path, sim_server: SimServer, sim: Any, mcp_sites: Any, agent_token: Any, mcp_client: Any
) -> None:
    _agent, token = agent_token
    # Sessions kept by the upstream, as the SDK's servers keep them by default: a restart forgets them.
    with run_guestshell(tmp_path / "shell", sim_server, "--stateful", token="gs-" + secrets.token_urlsafe(8)) as shell:
        add_http_upstream(shell, name="stateful")
        before = [_read(mcp_client, token, "stateful__read_file") for _ in range(4)]  # both workers hold a session
        assert [r.is_error for r in before] == [False] * 4, [tool_text(r) for r in before]
        shell.stop()
        shell.start_again()
        after = [_read(mcp_client, token, "stateful__read_file") for _ in range(6)]
    assert [r.is_error for r in after] == [False] * 6, [tool_text(r) for r in after]
    assert [_outcome(r) for r in after] == ["ok"] * 6
    assert len(shell.calls()) == 10  # every call ran once: the one refused on a forgotten session was sent again


def test_an_http_upstream_killed_during_a_call_says_it_may_have_run_and_is_used_again_once_restarted(
    tmp_path: Path, sim_server: SimServer, sim: Any, mcp_sites: Any, agent_token: Any, mcp_client: Any
) -> None:
    """A handshake-era upstream (its calls relayed, its answers streams) dies mid-call: whether the
    call ran is unknown, and said so; once it is back, the next calls open a new session."""
    _agent, token = agent_token
    with run_guestshell(tmp_path / "shell", sim_server, "--stateful", token="gs-" + secrets.token_urlsafe(8)) as shell:
        add_http_upstream(shell, name="killed")
        _assert_cut_says_it_may_have_run(mcp_client, token, "killed__slow", shell.calls, shell.proc.kill)

        shell.start_again()

        def read() -> Any:
            result = _read(mcp_client, token, "killed__read_file")
            return result if not result.is_error else None

        after = wait_until(read, 60, what="a call through the restarted upstream", every=0.5)
    assert _outcome(after) == "ok"
    assert [c["tool"] for c in shell.calls()][-1] == "read_file"


def _stdio_children(record: Path) -> list[int]:
    """The guest shell processes started for this test's stdio upstream (its record file is its own)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(record) in text and "--stdio" in text and _alive(int(cmdline.parent.name)):
            found.append(int(cmdline.parent.name))
    return found


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def _kill_all(pids: list[int]) -> None:
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not any(_alive(pid) for pid in pids), 30, what="the killed commands gone")


def test_a_stdio_upstream_whose_command_died_is_started_again_and_a_call_cut_by_it_says_it_may_have_run(
    sim: Any, mcp_sites: Any, agent_token: Any, mcp_client: Any, guestshell_stdio_command: GuestShellStdio
) -> None:
    command = guestshell_stdio_command
    upstream = upstream_create(
        actor=ADMIN,
        name="shelled",
        transport="stdio",
        command=command.argv,
        env={"PYTHONPATH": str(command.cwd), "PYTHONUNBUFFERED": "1"},
    )
    listed_and_approved(upstream)
    _agent, token = agent_token
    first = [_read(mcp_client, token, "shelled__read_file") for _ in range(4)]
    assert [r.is_error for r in first] == [False] * 4
    started = _stdio_children(command.record)
    assert started, "no command was started"
    _kill_all(started)

    # The next calls start the command again, in whichever process they reach.
    again = [_read(mcp_client, token, "shelled__read_file") for _ in range(4)]
    assert [r.is_error for r in again] == [False] * 4, [tool_text(r) for r in again]
    assert set(_stdio_children(command.record)).isdisjoint(started)

    # A command that dies while it runs a call: whether that call ran is unknown, and said so.
    _assert_cut_says_it_may_have_run(
        mcp_client, token, "shelled__slow", command.calls, lambda: _kill_all(_stdio_children(command.record))
    )


def test_a_guarded_call_to_an_upstream_that_does_not_answer_is_refused_before_any_checkpoint(
    tmp_path: Path,
    sim_server: SimServer,
    sim: Any,
    mcp_sites: Any,
    agent_token: Any,
    mcp_client: Any,
    worker: Any,
    admin_user: Any,
) -> None:
    _agent, token = agent_token
    with run_guestshell(tmp_path / "shell", sim_server, token="gs-" + secrets.token_urlsafe(8)) as shell:
        upstream = add_http_upstream(shell, name="downshell", connect_timeout_s=3)
        mutating_tool_add(actor=ADMIN, pattern="downshell/exec", vm_arg="host", description="guest shell")
        args = {"host": "web01", "command": f"echo broken > {NGINX}"}
        shell.stop()
        refused = call_tool(mcp_client, token, "downshell__exec", args)
        text = tool_text(refused)
        assert refused.is_error
        assert text.startswith("not forwarded and no checkpoint taken: upstream downshell is unavailable"), text
        assert text.endswith("the call did not run")
        assert _outcome(refused) == "upstream_failed"
        assert ChangeGuard.objects.count() == 0  # no guard, so no tagged checkpoint anywhere

        # "Test connection" says what the serving processes found, not only what a fresh session finds.
        check = Api(admin_user).post(f"/api/gateway/upstreams/{upstream.pk}/check/").json()
        assert check["ok"] is False
        assert any("has not reached it since" in said for said in check["links_down"]), check
        shell.start_again()
        check = Api(admin_user).post(f"/api/gateway/upstreams/{upstream.pk}/check/").json()
        assert check["ok"] is True
        assert any("it tries again on its next call" in said for said in check["links_down"]), check

        # Once its backoff passed, the next call gets through, guarded.
        def through() -> Any:
            result = call_tool(mcp_client, token, "downshell__exec", args)
            return result if not result.is_error else None

        done = wait_until(through, 60, what="a guarded call through the restarted upstream", every=0.5)
    assert done.meta["zerto-rewind/guard"]["ok"] is True
    assert sim.read_file("web01", NGINX) == b"broken\n"
    assert [c["tool"] for c in shell.calls()] == ["exec"]
