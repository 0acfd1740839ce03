"""Gateway mode end to end: an agent → /mcp (uvicorn) → policy and guard (real worker, simulator) →
the guest shell as a real upstream MCP server, over HTTP and stdio."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from mcp.client.stdio import DEFAULT_INHERITED_ENV_VARS, get_default_environment

from catalog.models import ToolSighting
from catalog.services import mutating_tool_add
from rewind.audit import Actor, verify_chain
from rewind.gateway.links import UpstreamSpec, UpstreamUnavailable, stdio_parameters
from rewind.gateway.listing import upstream_tools_refresh
from rewind.gateway.models import GatewayCall, Upstream, UpstreamTool
from rewind.gateway.services import (
    ListedTool,
    upstream_create,
    upstream_tools_approve_listed,
    upstream_tools_record,
    upstream_update,
)
from rewind.models import AuditEvent, ChangeGuard
from tests.fixtures import wait_until
from tests.gateway.support import GuestShellHttp, GuestShellStdio, add_http_upstream
from tests.helpers import call_tool, run, tool_text

pytestmark = pytest.mark.timeout(240)
NGINX = "/etc/nginx/nginx.conf"
ADMIN = Actor.user("admin")


def list_tools(mcp_client: Any, token: str) -> dict[str, Any]:
    async def go() -> Any:
        async with mcp_client(token) as client:
            return {t.name: t for t in (await client.list_tools()).tools}

    return run(go())


def test_upstream_tools_are_listed_beside_ours_with_their_schemas_and_annotations(
    mcp_sites: Any, agent_token: Any, mcp_client: Any, guestshell_http: GuestShellHttp
) -> None:
    add_http_upstream(guestshell_http)
    _agent, token = agent_token
    tools = list_tools(mcp_client, token)
    assert "zerto_guard_before_mutate" in tools
    gateway = {n for n in tools if n.startswith("guestshell__")}
    assert gateway == {f"guestshell__{t}" for t in ("exec", "write_file", "read_file", "append_line", "slow")}
    exec_tool = tools["guestshell__exec"]
    assert set(exec_tool.input_schema["properties"]) == {"host", "command"}
    assert exec_tool.annotations.read_only_hint is False
    assert tools["guestshell__read_file"].annotations.read_only_hint is True
    # Each listed tool the catalog does not list became a sighting before any call, with a guess.
    sighting = ToolSighting.objects.get(tool="guestshell/append_line")
    assert sighting.count == 0
    assert sighting.suggested_vm_arg == "computer_name"
    assert sighting.annotations is not None
    assert sighting.annotations["readOnlyHint"] is False


def test_a_catalog_listed_tool_is_guarded_then_forwarded_with_the_upstreams_own_credentials(
    sim: Any, mcp_sites: Any, agent_token: Any, mcp_client: Any, worker: Any, guestshell_http: GuestShellHttp
) -> None:
    add_http_upstream(guestshell_http)
    mutating_tool_add(actor=ADMIN, pattern="guestshell/exec", vm_arg="host", description="guest shell")
    agent, token = agent_token
    progress: list[Any] = []
    result = call_tool(
        mcp_client, token, "guestshell__exec", {"host": "web01", "command": f"echo broken > {NGINX}"}, progress
    )
    assert not result.is_error, tool_text(result)
    assert sim.read_file("web01", NGINX) == b"broken\n"
    meta = result.meta
    call_id = meta["zerto-rewind/call_id"]
    guard_meta = meta["zerto-rewind/guard"]
    assert guard_meta["ok"] is True
    assert guard_meta["change_id"] == f"gw-{call_id}"
    assert [c["status"] for c in guard_meta["checkpoints"]] == ["listed", "listed"]
    guard = ChangeGuard.objects.get(pk=guard_meta["id"])
    assert guard.status == ChangeGuard.Status.OK
    assert guard.agent_name == agent.name
    row = GatewayCall.objects.get(call_id=call_id)
    assert (row.decision, row.outcome, row.catalog_entry, row.vm) == ("guarded", "ok", "guestshell/exec", "web01")
    assert row.forwarded_at is not None
    assert guard.finished_at is not None
    assert row.forwarded_at >= guard.finished_at
    values = [p[0] for p in progress]
    assert values
    assert values == sorted(set(values)), values
    # The upstream saw the call once, with its own token; the agent's never left this service.
    seen = guestshell_http.calls()
    assert [c["tool"] for c in seen] == ["exec"]
    assert seen[0]["authorization"] == f"Bearer {guestshell_http.token}"
    assert token not in str(seen)
    decided = AuditEvent.objects.filter(action="gateway.call.decided", target_id=call_id).get()
    assert decided.data["decision"] == "guarded"


def test_a_guard_that_is_not_ok_forwards_nothing(
    sim: Any, mcp_sites: Any, agent_token: Any, mcp_client: Any, worker: Any, guestshell_http: GuestShellHttp
) -> None:
    add_http_upstream(guestshell_http)
    mutating_tool_add(actor=ADMIN, pattern="guestshell/*", vm_arg="host", description="guest shell")
    before = sim.read_file("web01", NGINX)
    _agent, token = agent_token
    result = call_tool(mcp_client, token, "guestshell__exec", {"host": "no-such-vm", "command": f"rm {NGINX}"})
    assert result.is_error
    assert "DO NOT PROCEED" in tool_text(result)
    assert guestshell_http.calls() == []
    assert sim.read_file("web01", NGINX) == before
    row = GatewayCall.objects.get(call_id=result.meta["zerto-rewind/call_id"])
    assert (row.decision, row.outcome, row.forwarded_at) == ("refused", "not_forwarded", None)


def test_arguments_that_do_not_fit_the_schema_are_refused_before_any_guard(
    mcp_sites: Any, agent_token: Any, mcp_client: Any, guestshell_http: GuestShellHttp
) -> None:
    add_http_upstream(guestshell_http)
    mutating_tool_add(actor=ADMIN, pattern="guestshell/exec", vm_arg="host", description="guest shell")
    _agent, token = agent_token
    result = call_tool(mcp_client, token, "guestshell__exec", {"host": "web01", "command": 42})
    assert result.is_error
    assert "do not match guestshell__exec's input schema" in tool_text(result)
    assert "command" in tool_text(result)
    assert not ChangeGuard.objects.exists()
    assert guestshell_http.calls() == []


@pytest.mark.parametrize(
    ("policy", "forwarded", "guarded"),
    [("pass", True, False), ("guard-if-protected", True, True), ("hold", False, False)],
)
def test_an_unlisted_tool_follows_its_upstreams_policy(
    sim: Any,
    mcp_sites: Any,
    agent_token: Any,
    mcp_client: Any,
    worker: Any,
    guestshell_http: GuestShellHttp,
    policy: str,
    forwarded: bool,
    guarded: bool,
) -> None:
    add_http_upstream(guestshell_http, default_policy=policy)
    _agent, token = agent_token
    args = {"computer_name": "web01", "path": NGINX, "line": "# appended"}
    result = call_tool(mcp_client, token, "guestshell__append_line", args)
    row = GatewayCall.objects.get(call_id=result.meta["zerto-rewind/call_id"])
    assert row.policy == policy
    assert bool(guestshell_http.calls()) is forwarded
    assert sim.read_file("web01", NGINX).endswith(b"# appended\n") is forwarded
    assert result.is_error is not forwarded, tool_text(result)
    assert (row.guard_id is not None) is guarded
    if guarded:
        assert row.decision == "guarded"
        assert row.vm_arg == "computer_name"
        assert result.meta["zerto-rewind/guard"]["ok"] is True
        sighting = ToolSighting.objects.get(tool="guestshell/append_line")
        assert (sighting.count, sighting.suggested_vm_arg) == (1, "computer_name")
    elif forwarded:
        assert row.decision == "passed"
        assert ToolSighting.objects.get(tool="guestshell/append_line").count == 1
    else:
        assert row.decision == "held"
        assert "held until a person classifies it" in tool_text(result)
    assert_decision_chained(row.call_id)


def assert_decision_chained(call_id: str) -> None:
    """A decision goes in waiting to be chained (``audit_append(chain=False)``): the call's own
    ``mcp.tool.called`` row, from the MCP audit writer, chains it just after; the chain is intact."""
    wait_until(lambda: not AuditEvent.objects.filter(seq__isnull=True).exists(), 10, what="every audit row chained")
    assert AuditEvent.objects.get(action="gateway.call.decided", target_id=call_id).seq is not None
    assert verify_chain()[1] is None


def test_guard_if_protected_passes_when_no_argument_names_a_protected_vm(
    mcp_sites: Any, agent_token: Any, mcp_client: Any, guestshell_http: GuestShellHttp
) -> None:
    add_http_upstream(guestshell_http)
    _agent, token = agent_token
    result = call_tool(mcp_client, token, "guestshell__slow", {"seconds": 0})
    assert not result.is_error, tool_text(result)
    row = GatewayCall.objects.get(call_id=result.meta["zerto-rewind/call_id"])
    assert (row.decision, row.policy) == ("passed", "pass")  # annotated read-only: passes by default


def test_a_retried_call_with_the_same_change_id_reuses_the_guard(
    sim: Any, mcp_sites: Any, agent_token: Any, mcp_client: Any, worker: Any, guestshell_http: GuestShellHttp
) -> None:
    add_http_upstream(guestshell_http)
    mutating_tool_add(actor=ADMIN, pattern="guestshell/write_file", vm_arg="host", description="guest shell")
    _agent, token = agent_token

    async def twice() -> list[Any]:
        async with mcp_client(token) as client:
            args = {"host": "web01", "path": "/tmp/x", "content": "1"}
            meta = {"zerto-rewind/change_id": "CHG-42"}
            return [await client.call_tool("guestshell__write_file", args, meta=meta) for _ in range(2)]

    first, second = run(twice())
    assert not first.is_error, tool_text(first)
    assert not second.is_error
    assert first.meta["zerto-rewind/guard"]["id"] == second.meta["zerto-rewind/guard"]["id"]
    assert first.meta["zerto-rewind/guard"]["change_id"] == "CHG-42"
    assert first.meta["zerto-rewind/call_id"] != second.meta["zerto-rewind/call_id"]
    assert ChangeGuard.objects.count() == 1


@pytest.mark.parametrize("mode", ["legacy", "auto"])  # the agent's protocol era: a session, or 2026-07-28
def test_progress_from_the_upstream_reaches_the_agent_that_asked_for_it(
    mode: str, mcp_sites: Any, agent_token: Any, mcp_client: Any, guestshell_http: GuestShellHttp
) -> None:
    add_http_upstream(guestshell_http)
    _agent, token = agent_token
    progress: list[Any] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, total, message))

    async def twice() -> list[Any]:
        async with mcp_client(token, mode) as client:
            wanted = await client.call_tool("guestshell__slow", {"seconds": 2}, progress_callback=on_progress)
            unwanted = await client.call_tool("guestshell__slow", {"seconds": 1})
            return [wanted, unwanted]

    results = run(twice())
    assert not any(r.is_error for r in results), [tool_text(r) for r in results]
    assert len(progress) >= 2
    values = [p[0] for p in progress]
    assert values == sorted(set(values))
    # An agent that asks for no progress gets none, and the upstream is not asked for any.
    assert [(c["tool"], c["progress_asked"]) for c in guestshell_http.calls()] == [("slow", True), ("slow", False)]


def test_the_stdio_transport_is_started_and_used(
    sim: Any,
    mcp_sites: Any,
    agent_token: Any,
    mcp_client: Any,
    worker: Any,
    guestshell_stdio_command: GuestShellStdio,
) -> None:
    command = guestshell_stdio_command
    upstream = upstream_create(
        actor=ADMIN,
        name="shell2",
        transport="stdio",
        command=command.argv,
        env={"PYTHONPATH": str(command.cwd), "PYTHONUNBUFFERED": "1"},
    )
    report = upstream_tools_refresh(upstream)
    assert "exec" in report.exported
    upstream_tools_approve_listed(actor=ADMIN, upstream=upstream)
    mutating_tool_add(actor=ADMIN, pattern="shell2/exec", vm_arg="host", description="guest shell over stdio")
    _agent, token = agent_token
    result = call_tool(mcp_client, token, "shell2__exec", {"host": "web01", "command": f"echo via-stdio > {NGINX}"})
    assert not result.is_error, tool_text(result)
    assert sim.read_file("web01", NGINX) == b"via-stdio\n"
    assert result.meta["zerto-rewind/guard"]["ok"] is True
    assert [c["tool"] for c in command.calls()] == ["exec"]


def test_an_upstream_that_is_down_is_a_clear_error_and_others_still_work(
    mcp_sites: Any, agent_token: Any, mcp_client: Any, guestshell_http: GuestShellHttp
) -> None:
    add_http_upstream(guestshell_http)
    broken = add_http_upstream(guestshell_http, name="broken")
    # It goes away after listing: its port now answers nothing.
    upstream_update(actor=ADMIN, upstream=broken, url="http://127.0.0.1:9/mcp", connect_timeout_s=2)
    _agent, token = agent_token
    result = call_tool(mcp_client, token, "broken__read_file", {"host": "web01", "path": NGINX})
    assert result.is_error
    assert "upstream broken" in tool_text(result)
    row = GatewayCall.objects.get(call_id=result.meta["zerto-rewind/call_id"])
    assert row.outcome == "upstream_failed"
    ok = call_tool(mcp_client, token, "guestshell__read_file", {"host": "web01", "path": NGINX})
    assert not ok.is_error, tool_text(ok)


class _Junk(BaseHTTPRequestHandler):
    """An "MCP server" that answers every request with a web page."""

    def do_POST(self) -> None:
        body = b"<html><body>It works!</body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def junk_url() -> Any:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Junk)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/mcp"
    server.shutdown()


def test_an_upstream_that_answers_garbage_is_a_clear_error_and_others_still_work(
    mcp_sites: Any, agent_token: Any, mcp_client: Any, guestshell_http: GuestShellHttp, junk_url: str
) -> None:
    add_http_upstream(guestshell_http)
    junk = upstream_create(actor=ADMIN, name="junk", url=junk_url, connect_timeout_s=3, default_policy="pass")
    with pytest.raises(UpstreamUnavailable, match="upstream junk"):
        upstream_tools_refresh(junk)
    junk.refresh_from_db()
    assert "upstream junk" in junk.last_error
    # As if it had listed a tool before it broke.
    schema = {"type": "object", "properties": {"host": {"type": "string"}}}
    upstream_tools_record(upstream=junk, listed=[ListedTool("peek", "", "", schema, None, None, None)], reserved=set())
    upstream_tools_approve_listed(actor=ADMIN, upstream=junk)
    _agent, token = agent_token
    result = call_tool(mcp_client, token, "junk__peek", {"host": "web01"})
    assert result.is_error
    assert "upstream junk" in tool_text(result)
    ok = call_tool(mcp_client, token, "guestshell__read_file", {"host": "web01", "path": NGINX})
    assert not ok.is_error, tool_text(ok)


def test_a_slow_upstream_is_cut_off_at_its_call_timeout(
    mcp_sites: Any, agent_token: Any, mcp_client: Any, guestshell_http: GuestShellHttp
) -> None:
    add_http_upstream(guestshell_http, call_timeout_s=1)
    _agent, token = agent_token
    started = time.monotonic()
    result = call_tool(mcp_client, token, "guestshell__slow", {"seconds": 8})
    assert time.monotonic() - started < 7
    assert result.is_error
    assert "upstream guestshell" in tool_text(result)
    row = GatewayCall.objects.get(call_id=result.meta["zerto-rewind/call_id"])
    assert row.outcome in ("error", "upstream_failed")
    assert row.error


def test_a_stdio_upstream_gets_only_its_own_environment() -> None:
    """Not this service's keys (the database URL, the encryption key...): the SDK passes its safe
    defaults (PATH, HOME...) and the upstream's configured variables, nothing else."""
    spec = UpstreamSpec(
        pk=1,
        name="s",
        transport="stdio",
        url="",
        headers=(),
        command=("python", "-m", "x"),
        env=(("TOKEN", "its-own"),),
        connect_timeout_s=5,
        call_timeout_s=5,
        version="v",
    )
    params = stdio_parameters(spec)
    assert params.env == {"TOKEN": "its-own"}
    inherited = set(get_default_environment())
    assert inherited <= set(DEFAULT_INHERITED_ENV_VARS)
    assert not {k for k in inherited if k.startswith(("REWIND", "DJANGO", "DATABASE", "REDIS", "MCP_"))}
    assert "its-own" not in repr(spec)


def test_the_beat_lists_every_upstream_at_once_and_a_down_one_only_reports_itself(
    transactional_db: None, guestshell_http: GuestShellHttp
) -> None:
    from rewind.gateway.listing import upstreams_refresh

    upstream_create(actor=ADMIN, name="guestshell", url=guestshell_http.url, headers=guestshell_http.headers)
    upstream_create(actor=ADMIN, name="gone", url="http://127.0.0.1:9/mcp", connect_timeout_s=2)
    said = upstreams_refresh()
    assert said["guestshell"] == "5 tools, 0 refused"
    assert said["gone"].startswith("upstream gone is unavailable")
    assert Upstream.objects.get(name="gone").last_error == said["gone"]
    assert UpstreamTool.objects.filter(upstream__name="guestshell", state="exported").count() == 5
