"""What test modules of more than one part share: helpers, not fixtures (those are the plugins
tests.fixtures, tests.simfixtures and tests.mcpfixtures).

- MCP from the test's side: ``run`` a coroutine, ``call_tool`` over the SDK client, and the raw
  JSON-RPC ``post`` with ``call_body`` / ``rpc_result``;
- guards and recoveries: ``install_starter_catalog``, ``tagged_rows`` (what the ZVM lists),
  ``wait_guard_finished``, ``guard_request``, ``guard_exec``, ``guard_row``, ``insert_tagged_checkpoint``, ``wait_recovery_finished``;
- the REST API as a browser sends it (``Api``), ``/metrics`` as Prometheus reads it (``scrape``),
  and ``test_database_url`` for the processes the tests start.

A part's own helpers live in that part's folder (``tests/<part>/support.py``); tests/test_layout.py
keeps test modules from importing each other.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import secrets
import string
import sys
from collections.abc import Callable, Coroutine, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import httpx2

from rewind.lib.processes import Proc, free_port
from tests.fixtures import InlineTasks, wait_until

if TYPE_CHECKING:
    from django.contrib.auth.models import User
    from django.test import Client

    from recoveries.models import RecoveryRequest
    from rewind.checkpoints.services import GuardOutcome
    from rewind.models import Agent, ChangeGuard, Site
    from rewind.zvm import ZvmConnection

# The MCP protocol version of the handshake era: stateless POSTs need no initialize.
LEGACY = "2025-11-25"
METRICS_TOKEN = "metrics-test-token-0123456789"
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def test_database_url() -> str:
    """A DATABASE_URL pointing at the test database, for processes the tests start."""
    from django.db import connection

    conf = connection.settings_dict
    if conf["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{Path(conf['NAME']).resolve()}"
    auth = quote(conf["USER"] or "")
    if conf["PASSWORD"]:
        auth += ":" + quote(conf["PASSWORD"])
    host = conf["HOST"] or "localhost"
    port = f":{conf['PORT']}" if conf["PORT"] else ""
    return f"postgres://{auth}@{host}{port}/{conf['NAME']}"


test_database_url.__test__ = False  # type: ignore[attr-defined]  # a helper, not a test


READY = "ready."  # what a Celery worker logs once it takes tasks


class WorkerProcess:
    """A real ``celery worker`` on the test database and the configured broker (``rewind.lib.processes.Proc``)."""

    def __init__(self, log_path: Path, concurrency: int = 3, name: str = "tests") -> None:
        self.log_path = log_path
        self.concurrency = concurrency
        self.name = name
        self.proc: Proc | None = None

    def start(self) -> None:
        """Start it; returns once it is ready (its log says "ready." once more than before)."""
        env = {**os.environ, "DATABASE_URL": test_database_url()}
        argv = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "rewind",
            "worker",
            "-P",
            "prefork",
            "-c",
            str(self.concurrency),
            "--loglevel",
            "INFO",
            "-n",
            f"{self.name}-{os.getpid()}@%h",
            "--without-gossip",
            "--without-mingle",
        ]
        # One log for every start, so a restart's readiness is one "ready." more than the log has.
        from django.conf import settings

        earlier = self.log_path.read_text(errors="replace").count(READY) if self.log_path.exists() else 0
        self.proc = Proc("celery worker", argv, log=self.log_path, append=True, env=env, cwd=settings.BASE_DIR)
        self.proc.wait_for_output(READY, count=earlier + 1)

    def running(self) -> bool:
        return self.proc is not None and self.proc.running()

    def kill(self) -> None:
        """Kill the worker and its pool children at once (a crash, not a shutdown)."""
        if self.running():
            assert self.proc is not None
            self.proc.kill(timeout=30)

    def stop(self) -> None:
        """Stop the worker; returns once it and its pool children are gone (their connections closed)."""
        if self.proc:
            self.proc.stop(timeout=20)

    def restart(self) -> None:
        self.stop()
        self.start()


# --- MCP -------------------------------------------------------------------------------------


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    # On a thread of its own: once a Playwright test ran in the session, the main thread has
    # a running event loop and asyncio.run refuses to nest.
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


async def call_tool_async(
    mcp_client: Any, token: str, tool: str, args: dict[str, Any], progress: list[Any] | None = None
) -> Any:
    """One tools/call over the SDK's client; progress notifications appended to ``progress``."""
    async with mcp_client(token, "auto") as client:
        if progress is None:
            return await client.call_tool(tool, args)

        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            progress.append((value, total, message))

        return await client.call_tool(tool, args, progress_callback=on_progress)


def call_tool(mcp_client: Any, token: str, tool: str, args: dict[str, Any], progress: list[Any] | None = None) -> Any:
    return run(call_tool_async(mcp_client, token, tool, args, progress))


async def find_protection_over_mcp(mcp_client: Any, token: str, mode: str, vm: str) -> tuple[str, Any]:
    """``zerto_find_protection`` over the given transport mode: (protocol version, result)."""
    async with mcp_client(token, mode) as client:
        result = await client.call_tool("zerto_find_protection", {"vm": vm})
        return client.protocol_version, result


def tool_ok(result: Any) -> dict[str, Any]:
    """The structured answer of a tool call that did not fail."""
    assert not result.is_error, result.content
    return dict(result.structured_content)


def poll_recovery_status(mcp_client: Any, token: str, recovery_id: int, timeout: float = 180.0) -> dict[str, Any]:
    """``zerto_recovery_status`` until the run ended (a bound on a hang, not a speed check)."""

    def ended() -> dict[str, Any] | None:
        out = tool_ok(call_tool(mcp_client, token, "zerto_recovery_status", {"id": recovery_id}))
        return out if out["status"] in ("succeeded", "failed") else None

    return wait_until(ended, timeout, what=f"the end of recovery {recovery_id}", every=0.3)


def tool_text(result: Any) -> str:
    return "\n".join(c.text for c in result.content if getattr(c, "text", None))


def call_body(vm: str = "web01", rpc_id: int = 1) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": rpc_id,
        "method": "tools/call",
        "params": {"name": "zerto_find_protection", "arguments": {"vm": vm}},
    }


def post(url: str, body: Any, token: str | None = None, **headers: str) -> httpx2.Response:
    """One handshake-era stateless POST (no initialize needed on a stateless server)."""
    base = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": LEGACY,
    }
    if token is not None:
        base["Authorization"] = f"Bearer {token}"
    content = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return httpx2.post(url, content=content, headers={**base, **headers}, timeout=30)


def rpc_result(resp: httpx2.Response) -> dict[str, Any]:
    """The JSON-RPC message of an answer, whether plain JSON or the last event of a stream."""
    if resp.headers["content-type"].startswith("text/event-stream"):
        data = [line[5:].strip() for line in resp.text.splitlines() if line.startswith("data:")]
        return dict(json.loads([d for d in data if d][-1]))
    return dict(resp.json())


# --- The ZVM client on the simulator ---------------------------------------------------------

TOKEN_CALL = "POST /auth/realms/zerto/protocol/openid-connect/token"


def site_name(sim: Any, slug: str) -> str:
    return next(s["name"] for s in sim.state()["sites"] if s["slug"] == slug)


def connection(sim: Any, slug: str = "site-a", **kw: Any) -> ZvmConnection:
    from rewind.zvm import ZvmConnection
    from tests.simfixtures import CLIENT_ID, PASSWORD, USERNAME

    settings: dict[str, Any] = dict(
        site_name=site_name(sim, slug),
        base_url=sim.site_url(slug),
        username=USERNAME,
        password=PASSWORD,
        client_id=CLIENT_ID,
        connect_timeout=5.0,
        read_timeout=30.0,
        backoff_initial=0.01,
        backoff_max=0.05,
    )
    settings.update(kw)
    return ZvmConnection(**settings)


def closed_port() -> int:
    """A port of 127.0.0.1 nobody listens on: a connection to it is refused."""
    return free_port()


def calls(sim: Any, slug: str, key: str) -> int:
    """How often the simulated site saw ``METHOD /template`` (e.g. ``GET /v1/vpgs``)."""
    return int(sim.calls(slug).get(key, 0))


# --- Guards and recoveries -------------------------------------------------------------------


def install_starter_catalog() -> None:
    """The starter list as its data migration installs it (transactional tests flush it away)."""
    from django.apps import apps

    importlib.import_module("catalog.migrations.0002_starter_list").install(apps, None)


def tagged_rows(sim: Any, slug: str, vpg_name: str, tag: str) -> list[dict[str, Any]]:
    """The checkpoints with ``tag`` that the simulated ZVM lists for a VPG (raw API rows)."""
    http = sim.http
    base = sim.site_url(slug)
    auth = {"Authorization": f"Bearer {sim.token(slug)}"}
    vpgs = http.get(f"{base}/v1/vpgs", params={"name": vpg_name}, headers=auth, timeout=30).json()
    vpg_id = vpgs[0]["VpgIdentifier"]
    rows = http.get(f"{base}/v1/vpgs/{vpg_id}/checkpoints", headers=auth, timeout=30).json()
    return [r for r in rows if r.get("Tag") == tag]


def wait_for_tasks(
    probe: Callable[[], Any], timeout: float = 30.0, tasks: InlineTasks | None = None, *, what: str = ""
) -> Any:
    """Until ``probe()`` is truthy: running the queued tasks here (``tasks``), or while a worker runs them."""
    if tasks is not None:
        return tasks.wait_for(probe, timeout)
    return wait_until(probe, timeout, what=what, every=0.1)


def wait_guard_finished(guard: ChangeGuard, timeout: float = 60.0, tasks: InlineTasks | None = None) -> ChangeGuard:
    """Until the guard ended: its tasks run here (``tasks``), or the worker runs them in another process."""
    from rewind.models import ChangeGuard

    def ended() -> bool:
        guard.refresh_from_db()
        return guard.status in ChangeGuard.FINISHED

    wait_for_tasks(ended, timeout, tasks, what=f"the end of guard {guard.pk}")
    return guard


def wait_recovery_finished(
    recovery: RecoveryRequest, timeout: float = 180.0, tasks: InlineTasks | None = None
) -> RecoveryRequest:
    """Until the run finished, in this process (``tasks``) or in the worker (a bound on a hang, not a speed check)."""
    from recoveries.models import RecoveryRequest

    def done() -> bool:
        recovery.refresh_from_db()
        return recovery.status in (RecoveryRequest.Status.SUCCEEDED, RecoveryRequest.Status.FAILED)

    wait_for_tasks(done, timeout, tasks, what=f"the end of recovery {recovery.pk}")
    return recovery


def guard_request(agent: Agent, vm: str, *, action: str = "edit", **kw: Any) -> ChangeGuard:
    """A guard asked for as an agent asks for one (``guard_create``); the poller does the rest."""
    from rewind.checkpoints.services import guard_create

    outcome = guard_create(agent_name=agent.name, agent_id=agent.pk, vm=vm, action=action, **kw)
    assert outcome.guard is not None, outcome.refusal
    return outcome.guard


def guard_exec(agent: Agent, vm: str, *, command: str, action: str, **kw: Any) -> GuardOutcome:
    """What an agent asks before it runs ``command`` on ``vm`` over ssh/exec (``guard_before_mutate``)."""
    from rewind.checkpoints.services import guard_before_mutate

    arguments = {"host": vm, "command": command}
    return guard_before_mutate(
        agent_name=agent.name, agent_id=agent.pk, tool="ssh/exec", arguments=arguments, action=action, **kw
    )


def guard_row(
    *,
    agent: str = "fixer",
    vm: str = "web01",
    change_id: str = "chg-1",
    action: str = "edit",
    status: str = "running",
    vpgs: Mapping[str, Mapping[str, Any]] | None = None,
    **fields: Any,
) -> ChangeGuard:
    """A guard and its tagged checkpoints as the database holds them, no ZVM asked: for what reads
    them. ``vpgs`` maps each VPG's name to its row's fields; ``fields`` set the guard's others."""
    from rewind.models import ChangeGuard, TaggedCheckpoint

    guard = ChangeGuard.objects.create(
        agent_name=agent,
        action=action,
        vm_name=vm,
        change_id=change_id,
        status=status,
        **{
            "vm_identifier": f"srv.{vm}-id",
            "tag": f"ai:{agent} | {action} | vm={vm} | change={change_id}",
            "timeout_s": 60,
            **fields,
        },
    )
    for name, row in (vpgs or {}).items():
        TaggedCheckpoint.objects.create(guard=guard, **{"vpg_name": name, "vpg_identifier": f"{name}-guid", **row})
    return guard


def insert_tagged_checkpoint(
    sim: Any, sites: dict[str, Site], vm: str, change_id: str, agent_name: str = "fixer"
) -> ChangeGuard:
    """What the guard does, done by hand: one tagged checkpoint per VPG, recorded as listed."""
    from django.utils import timezone

    from rewind.models import ChangeGuard, TaggedCheckpoint
    from rewind.sites import site_client

    info = sim.vm(vm)
    tag = f"ai:{agent_name} | edit | vm={vm} | change={change_id} | {timezone.now():%Y-%m-%dT%H:%M:%SZ}"
    guard = ChangeGuard.objects.create(
        agent_name=agent_name,
        action="edit",
        vm_identifier=info["identifier"],
        vm_name=info["name"],
        change_id=change_id,
        tag=tag,
        status=ChangeGuard.Status.OK,
        timeout_s=60,
    )
    for vpg in info["vpgs"]:
        client = site_client(sites[vpg["protected"]])
        # The simulator's insert task takes 0.3 s of real time; what it takes is no part of
        # what these tests are about, so this one completes at once.
        sim.add_fault("task_delay", vpg["protected"], seconds=0, count=1)
        task_id = client.insert_tagged_checkpoint(vpg["identifier"], tag)
        # The lambdas run before the loop moves on, so binding the loop variables is safe.
        wait_for_tasks(lambda: client.get_task(task_id).completed)  # noqa: B023
        vpg_id = vpg["identifier"]
        found = wait_for_tasks(lambda: next((c for c in client.list_checkpoints(vpg_id) if c.tag == tag), None))  # noqa: B023
        TaggedCheckpoint.objects.create(
            guard=guard,
            vpg_identifier=vpg["identifier"],
            vpg_name=vpg["name"],
            site=sites[vpg["protected"]],
            protected_site_identifier=sites[vpg["protected"]].identifier,
            recovery_site_identifier=sites[vpg["recovery"]].identifier,
            recovery_site_name=sites[vpg["recovery"]].name,
            checkpoint_identifier=found.identifier,
            checkpoint_timestamp=found.timestamp,
            status=TaggedCheckpoint.Status.LISTED,
        )
    return guard


# --- REST and /metrics -----------------------------------------------------------------------


class Api:
    """A signed-in browser: session cookie plus the CSRF cookie/header pair a page would send."""

    def __init__(self, user: User | None) -> None:
        from django.conf import settings
        from django.test import Client

        self.client = Client(enforce_csrf_checks=True)
        if user is not None:
            self.client.force_login(user)
        self.csrf = "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(32))
        self.client.cookies[settings.CSRF_COOKIE_NAME] = self.csrf

    def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        return self.client.get(path, params or {})

    def _send(self, method: str, path: str, body: Any, *, csrf: bool) -> Any:
        headers = {"X-CSRFToken": self.csrf} if csrf else {}
        send = getattr(self.client, method)
        return send(
            path, data=json.dumps(body if body is not None else {}), content_type="application/json", headers=headers
        )

    def post(self, path: str, body: Any = None, *, csrf: bool = True) -> Any:
        return self._send("post", path, body, csrf=csrf)

    def patch(self, path: str, body: Any = None) -> Any:
        return self._send("patch", path, body, csrf=True)

    def put(self, path: str, body: Any = None) -> Any:
        return self._send("put", path, body, csrf=True)


def scrape(client: Client) -> Samples:
    """``/metrics`` read with ``METRICS_TOKEN`` and parsed as Prometheus does."""
    from prometheus_client.parser import text_string_to_metric_families

    response = client.get("/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(response.content.decode())
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def work_queued(callbacks: list[Callable[[], Any]]) -> list[Callable[[], Any]]:
    """The work a commit queued (``django_capture_on_commit_callbacks``), without the audit chainer:
    on PostgreSQL every audit append queues ``chain_pending`` after its commit (rewind.audit.chaining)."""
    from rewind.audit.chaining import chain_pending

    return [callback for callback in callbacks if callback is not chain_pending]
