#!/usr/bin/env python
"""Benchmark: the production shape under agents, approvers and an upstream at once; and a 30-minute soak.

``manage.py runstack --replicas 2 --celery-workers 2`` on a PostgreSQL and a Redis of its own, the guest shell
as an HTTP upstream, and every agent an official MCP SDK client with a token of its own, all at once: agents
guarding their VMs, one change guarded many times, recoveries approved over REST as their guards end, calls
through the gateway, and look-ups timed from when they were due. ``--quick`` is the size CI runs
(``tests/bench/test_load.py``); ``--soak-minutes`` runs the mix slower for that long and compares each process's
memory, descriptors, connections and table rows at both ends. What bounds its figures on 2 cores: see the
benchmarks page.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import itertools
import multiprocessing
import os
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: the repository must be importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench._common import PYTHON, REPO, fresh_dir, private_postgres, private_redis, sim_control
from bench.figures import Report, parse_args
from bench.mcp_find import PROTOCOL, call_body, call_ok
from rewind.lib.processes import Proc, free_port, free_ports

WORK = REPO / "var" / "bench-load"
FILE = "/etc/app/release.conf"
CAP = 10.0  # ZVM_MAX_REQUESTS_PER_S, the default the stack runs with
FIND_P99_TARGET_MS = 250.0
GATEWAY_CALLS_EACH = 5
FIND_CLIENTS = 8
# Look-ups spread over the load at this rate, rather than sent back to back by 8 clients, which made a closed
# loop measuring its own burst more than look-ups under the load (see the benchmarks page).
FIND_PER_S = 8.0
WARM_UP_MIN = 2.0
# What the processes' pools may hold at most: per replica the MCP threads (rewind.mcp.context
# POOL_SIZE 8), the audit writer and Django's request thread; per worker its 2 pool processes,
# its main process and heartbeat thread; the beat; this process.
PG_CONNECTIONS_BOUND = 2 * (8 + 1 + 1) + 2 * (2 + 2) + 1 + 1
QUICK = {"agents": 10, "same_change": 10, "recoveries": 4, "gateway": 4, "finds": 60}


@cache
def agent_tls() -> ssl.SSLContext:
    """One TLS context for every client this process makes: httpx builds one per client otherwise, loading the CA
    store each time, CPU taken from the stack on the same cores (measured: see the benchmarks page)."""
    return ssl.create_default_context()


# --- the production shape ---------------------------------------------------------------------------
class Shape:
    """``manage.py runstack`` on a private PostgreSQL and Redis; this process set up on the same database."""

    REPLICAS = 2

    def __init__(self, stack: contextlib.ExitStack, work: Path, vms: int) -> None:
        pg = work / "pg"
        pg.mkdir()
        self.stack = stack
        database = stack.enter_context(private_postgres(pg))
        redis = stack.enter_context(private_redis(work))
        self.port = free_ports(self.REPLICAS)
        self.sim_port = free_port()
        self.env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
        self.env.update(
            DATABASE_URL=database,
            REDIS_URL=redis,
            REWIND_VAR_DIR=str(work / "var"),
            REWIND_PORT=str(self.port),
            REWIND_SIM_PORT=str(self.sim_port),
            DJANGO_SETTINGS_MODULE="rewind.settings",
            PYTHONUNBUFFERED="1",
        )
        os.environ.update(self.env)  # this process reads the same database, keys and broker
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", interactive=False, verbosity=0)
        argv = [PYTHON, "manage.py", "runstack", "--replicas", str(self.REPLICAS), "--celery-workers", "2"]
        argv += ["--sim-vms", str(vms)]
        self.proc = Proc("runstack", argv, log=work / "runstack.log", cwd=REPO, env=self.env)
        stack.callback(self._stop)
        self.proc.wait_for_output("Press Ctrl-C", timeout=180)
        self.sim_url = f"https://127.0.0.1:{self.sim_port}"
        self.redis_port = int(redis.rsplit(":", 1)[1].split("/")[0])

    def _stop(self) -> None:
        import signal

        self.proc.stop(sig=signal.SIGINT, timeout=60)

    def url(self, n: int) -> str:
        return f"http://127.0.0.1:{self.port + n % self.REPLICAS}"

    def urls(self) -> list[str]:
        return [self.url(n) for n in range(self.REPLICAS)]

    def approver_password(self) -> str:
        line = next(ln for ln in self.proc.output().splitlines() if ln.startswith("Demo approver:"))
        return line.split("password", 1)[1].split()[0]

    def processes(self) -> dict[str, int]:
        """runstack's children by the name it gives them (web-1, worker-2, beat, simulator)."""
        names = {}
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                if int(stat.read_text().rsplit(")", 1)[1].split()[1]) != self.proc.pid:
                    continue
                cmd = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except (OSError, ValueError, IndexError):
                continue
            names[_process_name(cmd, self.port)] = int(stat.parent.name)
        return names


def _process_name(cmd: str, port: int) -> str:
    if " zvmsim " in cmd:
        return "simulator"
    if " beat " in cmd:
        return "beat"
    if "-n worker" in cmd:
        return "worker-" + cmd.split("-n worker", 1)[1].split("@", 1)[0]
    replica = int(cmd.split("--port ", 1)[1].split()[0]) - port + 1
    return f"web-{replica}"


def start_guestshell(shape: Shape, work: Path) -> None:
    """The guest shell over HTTP with a token, added as upstream ``guestshell``, its tools listed."""
    from rewind.audit import Actor
    from rewind.gateway.listing import upstream_tools_refresh
    from rewind.gateway.services import upstream_create, upstream_tools_approve_listed

    token = "bench-" + os.urandom(8).hex()
    ca = str(Path(shape.env["REWIND_VAR_DIR"]) / "sim" / "ca.pem")
    argv = [PYTHON, "-m", "tests.gateway.guestshell", "--http", "--port", "0", "--sim-url", shape.sim_url]
    proc = Proc("guestshell", [*argv, "--ca-bundle", ca, "--token", token], log=work / "guestshell.log", cwd=REPO)
    url = proc.wait_for_output("guestshell ready on ").split("guestshell ready on ", 1)[1].split()[0]
    shape.guestshell = proc  # type: ignore[attr-defined]
    shape.stack.callback(proc.stop)  # stopped with the shape (it outlived the run before)
    upstream = upstream_create(
        actor=Actor.system("bench"), name="guestshell", url=url, headers={"Authorization": f"Bearer {token}"}
    )
    upstream_tools_refresh(upstream)
    upstream_tools_approve_listed(actor=Actor.system("bench"), upstream=upstream)


def make_tokens(count: int) -> list[str]:
    from django.contrib.auth import get_user_model

    from rewind.agents import agent_create, agent_token_issue
    from rewind.audit import Actor

    actor = Actor.system("bench")
    owner, _ = get_user_model().objects.get_or_create(username="bench-owner", defaults={"is_superuser": True})
    tokens = []
    for n in range(count):
        agent = agent_create(actor=actor, name=f"load-{n:03d}-{os.getpid()}", owner=owner)
        tokens.append(agent_token_issue(actor=actor, agent=agent).token)
    return tokens


def eligible_vms(count: int) -> list[str]:
    """The first ``count`` Linux filler VMs (the guest file is a Linux path) whose every VPG can take a
    checkpoint now and is protected and recovered at the two sites the stack registered."""
    from rewind.models import Site
    from rewind.sites import site_client

    registered = {"site-a", "site-b"}  # manage.py demo_setup's

    busy = {
        v.identifier
        for site in Site.objects.all()
        for v in site_client(site).list_vpgs()
        if v.status == 0 or v.sub_status == 1 or v.failover_test_running
    }
    http = sim_control()
    found: list[str] = []
    for number in itertools.count(1):
        if len(found) == count:
            return found
        name = f"vm-{number:05d}"
        resp = http.get(f"{_sim_url()}/_sim/vms/{name}", timeout=30)
        if resp.status_code == 404:
            raise SystemExit(f"only {len(found)} filler VMs can take a checkpoint")
        vm = resp.json()
        usable = all(v["identifier"] not in busy and {v["protected"], v["recovery"]} <= registered for v in vm["vpgs"])
        if vm["os"] == "linux" and vm["vpgs"] and usable:
            found.append(name)
    return found


def _sim_url() -> str:
    return f"https://127.0.0.1:{os.environ['REWIND_SIM_PORT']}"


@cache
def guest_files() -> Any:
    """One session for every guest file the agents set, its connections kept: a session per file made a TLS context
    per file, which cost the load's first seconds (measured: see the benchmarks page)."""
    return sim_control()


def set_guest_file(vm: str, text: str) -> None:
    guest_files().put(
        f"{_sim_url()}/_sim/vms/{vm}/files", json={"path": FILE, "text": text}, timeout=30
    ).raise_for_status()


# --- agents --------------------------------------------------------------------------------------------
@dataclass
class Tally:
    calls: int = 0
    failed: list[str] = field(default_factory=list)
    find_ms: list[float] = field(default_factory=list)
    find_at_s: list[float] = field(default_factory=list)
    guards: dict[str, tuple[str, str]] = field(default_factory=dict)  # guard id -> (vm, tag)
    recovered: dict[int, tuple[str, str]] = field(default_factory=dict)  # recovery id -> (expected sha, got)

    def fail(self, what: str) -> None:
        self.failed.append(what[:300])

    def add_finds(self, found: Found) -> None:
        self.calls += found.calls
        self.find_ms += found.find_ms
        self.find_at_s += found.find_at_s
        for what in found.failed:
            self.fail(what)


async def call(url: str, token: str, tool: str, args: dict[str, Any]) -> Any:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {token}"}
    timeout = httpx2.Timeout(60.0, read=600.0)
    async with httpx2.AsyncClient(headers=headers, timeout=timeout, verify=agent_tls()) as http:
        async with Client(streamable_http_client(f"{url}/mcp", http_client=http), mode="auto") as client:
            return await client.call_tool(tool, args)


class Load:
    def __init__(self, shape: Shape, tally: Tally) -> None:
        self.shape, self.tally = shape, tally
        self.n = itertools.count()
        self.approver: Any = None
        # The approver signs in once, as a person approving twenty recoveries does: each sign-in the first
        # recoveries raced to make cost the replica a PBKDF2 hash in the load's first seconds.
        self.signing_in = threading.Lock()

    def url(self) -> str:
        return self.shape.url(next(self.n))

    async def tool(self, token: str, tool: str, args: dict[str, Any]) -> dict[str, Any] | None:
        self.tally.calls += 1
        try:
            result = await call(self.url(), token, tool, args)
        except Exception as exc:  # a call that raised is a failed call, whatever it was
            self.tally.fail(f"{tool}: {type(exc).__name__}: {exc}")
            return None
        if result.is_error:
            self.tally.fail(f"{tool}: {' '.join(getattr(c, 'text', '') for c in result.content)}")
            return None
        return dict(result.structured_content or {})

    async def guard_and_recover(self, token: str, vm: str, change: str, recover: bool) -> None:
        text = f"release {change}\n"
        await asyncio.to_thread(set_guest_file, vm, text)
        out = await self.tool(
            token, "zerto_create_tagged_checkpoint", {"vm": vm, "action": "load", "change_id": change}
        )
        if out is None:
            return
        self.tally.guards[str(out["id"])] = (vm, out["tag"])
        if recover:
            await self.recover(token, vm, change, hashlib.sha256(text.encode()).hexdigest())

    async def recover(self, token: str, vm: str, change: str, sha: str) -> None:
        args = {"vm": vm, "path": FILE, "change_id": change, "reason": "load: undo"}
        asked = await self.tool(token, "zerto_recover_file", args)
        if asked is None:
            return
        rid = int(asked["id"])
        await asyncio.to_thread(self.approve, rid)
        for _ in range(600):
            status = await self.tool(token, "zerto_recovery_status", {"id": rid})
            if status is None:
                return
            if status["status"] in ("succeeded", "failed"):
                got = (status.get("result") or {}).get("sha256") or status.get("error") or status["status"]
                self.tally.recovered[rid] = (sha, got)
                return
            await asyncio.sleep(1.0)
        self.tally.fail(f"recovery {rid} did not end in 10 minutes")

    def approve(self, recovery_id: int) -> None:
        with self.signing_in:
            if self.approver is None:
                self.approver = self.signed_in()
        answer = self.approver.post(f"{self.url()}/api/recoveries/{recovery_id}/approve/", timeout=60)
        if answer.status_code != 200:
            self.tally.fail(f"approve {recovery_id}: HTTP {answer.status_code} {answer.text[:200]}")

    def signed_in(self) -> Any:
        import requests

        http = requests.Session()
        login = f"{self.shape.url(0)}/admin/login/"
        http.get(login, timeout=30)
        form = {"username": "approver", "password": self.shape.approver_password()}
        form["csrfmiddlewaretoken"] = http.cookies["csrftoken"]
        http.post(login, data=form, headers={"Referer": login}, timeout=30, allow_redirects=False)
        http.headers.update({"X-CSRFToken": http.cookies["csrftoken"], "Referer": f"{self.shape.url(0)}/admin/"})
        return http

    async def finds(self, token: str, count: int, vms: list[str]) -> None:
        """``count`` look-ups by ``FIND_CLIENTS`` clients on this process's event loop."""
        self.tally.add_finds(await find_clients(self.shape.urls(), token, count, vms))

    async def finds_apart(self, token: str, count: int, vms: list[str]) -> None:
        """The same look-ups, ``FIND_PER_S`` a second, from a process of their own, as agents would send them: on
        this process's busy loop an answer waits for a turn of the loop before it is timed."""
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            loop = asyncio.get_running_loop()
            urls = self.shape.urls()
            found = await loop.run_in_executor(pool, find_clients_run, urls, token, count, vms, FIND_PER_S)
        self.tally.add_finds(found)

    async def gateway(self, token: str, vm: str) -> None:
        for _ in range(GATEWAY_CALLS_EACH):
            await self.tool(token, "guestshell__read_file", {"host": vm, "path": FILE})


@dataclass
class Found:
    calls: int = 0
    find_ms: list[float] = field(default_factory=list)
    find_at_s: list[float] = field(default_factory=list)  # when each was sent, from the first
    failed: list[str] = field(default_factory=list)


async def find_clients(urls: list[str], token: str, count: int, vms: list[str], per_s: float | None = None) -> Found:
    """``count`` look-ups by ``FIND_CLIENTS`` clients, each a kept-alive connection sending the 2026-07-28 request
    as it goes on the wire (the service's time, not the SDK's); every client is made before the first is timed.
    ``per_s``: look-up ``i`` is due ``i / per_s`` after the start and timed from then, so no stall hides in a
    slipping schedule; None: each client sends its next as soon as it has an answer."""
    import httpx2

    found = Found()
    queue = iter(range(count))
    headers = {
        "Authorization": f"Bearer {token}",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": PROTOCOL,
        "Mcp-Method": "tools/call",
        "Mcp-Name": "zerto_find_protection",
    }
    clients = [httpx2.AsyncClient(headers=headers, timeout=60.0, verify=agent_tls()) for _ in range(FIND_CLIENTS)]

    async def client(n: int, http: httpx2.AsyncClient) -> None:
        async with http:
            for i in queue:
                found.calls += 1
                body = call_body(i, "zerto_find_protection", {"vm": vms[i % len(vms)]})
                started = time.perf_counter()
                if per_s is not None:
                    started = begun + i / per_s
                    await asyncio.sleep(started - time.perf_counter())
                resp = await http.post(f"{urls[n % len(urls)]}/mcp", content=body)
                if call_ok(resp.status_code, resp.text):
                    found.find_ms.append((time.perf_counter() - started) * 1000)
                    found.find_at_s.append(started - begun)
                else:
                    found.failed.append(f"zerto_find_protection: HTTP {resp.status_code} {resp.text[:200]}")

    begun = time.perf_counter()
    await asyncio.gather(*(client(n, http) for n, http in enumerate(clients)))
    return found


def find_clients_run(urls: list[str], token: str, count: int, vms: list[str], per_s: float | None) -> Found:
    return asyncio.run(find_clients(urls, token, count, vms, per_s))


def p99(samples: list[float]) -> float:
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


# --- what the ZVMs and the records say afterwards -----------------------------------------------------
def checkpoints_not_one(guards: dict[str, tuple[str, str]]) -> list[str]:
    """Each (VPG, change) of the guards that the ZVMs list with other than exactly one tagged checkpoint."""
    from rewind.models import Site, TaggedCheckpoint
    from rewind.sites import site_client

    clients = {site.pk: site_client(site) for site in Site.objects.all()}
    listings: dict[tuple[int | None, str], list[Any]] = {}
    wrong = []
    for guard_id, (vm, tag) in guards.items():
        for row in TaggedCheckpoint.objects.filter(guard_id=int(guard_id)):
            key = (row.site_id, row.vpg_identifier)
            if key not in listings and row.site_id is not None:
                listings[key] = clients[row.site_id].list_checkpoints(row.vpg_identifier)
            count = len([cp for cp in listings.get(key, []) if (cp.tag or "") == tag])
            if count != 1:
                wrong.append(f"{vm} {row.vpg_name}: {count}")
    return wrong


def sessions_left() -> int:
    http = sim_control()
    sites = http.get(f"{_sim_url()}/_sim/state", timeout=30).json()["sites"]
    return sum(
        1
        for site in sites
        for s in http.get(f"{_sim_url()}/_sim/sites/{site['slug']}/flrs", timeout=30).json()
        if s["status"] != "UnmountInProgress" and not s["foreign"]
    )


def busiest_second() -> int:
    """The most requests any one site saw in a second; over the cap, what made up that second is printed."""
    http = sim_control()
    sites = http.get(f"{_sim_url()}/_sim/state", timeout=30).json()["sites"]
    rates = {s["slug"]: http.get(f"{_sim_url()}/_sim/sites/{s['slug']}/rate", timeout=30).json() for s in sites}
    slug, busiest = max(rates.items(), key=lambda item: int(item[1]["peak_per_s"]))
    if int(busiest["peak_per_s"]) > CAP:
        print(f"  the busiest second, at {slug} (seconds after its first request):")
        for seen in busiest.get("peak_window", []):
            print(f"    +{seen['after_s']:.3f} s  {seen['call']}  (at {seen['at']:.3f})")
    return int(busiest["peak_per_s"])


def reap_once_and_verify() -> bool:
    from django.core.management import call_command

    from rewind.audit import Actor
    from rewind.audit.verification import audit_chain_verify

    call_command("reap", verbosity=0)
    return bool(audit_chain_verify(actor=Actor.system("bench")).ok)


# --- the runs ------------------------------------------------------------------------------------------
async def load_run(shape: Shape, args: argparse.Namespace, tokens: list[str], vms: list[str]) -> Tally:
    tally = Tally()
    load = Load(shape, tally)
    agents, rest = tokens[: args.agents], tokens[args.agents :]
    same, finder, gateway = rest[0], rest[1], rest[2 : 2 + args.gateway]
    work: list[Awaitable[None]] = [
        load.guard_and_recover(token, vm, f"LOAD-{n:03d}-{os.getpid()}", recover=n < args.recoveries)
        for n, (token, vm) in enumerate(zip(agents, vms, strict=False))
    ]
    same_change = {"vm": "web01", "action": "load: one change", "change_id": f"LOAD-SAME-{os.getpid()}"}

    async def one_of_many() -> None:
        out = await load.tool(same, "zerto_create_tagged_checkpoint", same_change)
        if out is not None:
            tally.guards[str(out["id"])] = ("web01", out["tag"])

    work += [one_of_many() for _ in range(args.same_change)]
    work += [load.gateway(token, vms[n % len(vms)]) for n, token in enumerate(gateway)]
    work.append(load.finds_apart(finder, args.finds, vms))
    await asyncio.gather(*work)
    return tally


def idle_find_p99(shape: Shape, token: str, vms: list[str], count: int) -> float:
    """The look-up's p99 on the idle stack with its cache warm: a first pass fills each replica's cache (a cold
    look-up waits for the ZVMs behind the request cap), the second is measured."""
    asyncio.run(Load(shape, Tally()).finds(token, len(vms) * 2, vms))
    tally = Tally()
    asyncio.run(Load(shape, tally).finds_apart(token, count, vms))
    return p99(tally.find_ms)


def print_slow_finds(tally: Tally, bucket_s: float = 5.0) -> None:
    """When the slow look-ups were sent: the agents all start at once, and the first seconds differ."""
    slow: dict[int, int] = {}
    for ms, at in zip(tally.find_ms, tally.find_at_s, strict=True):
        if ms > FIND_P99_TARGET_MS:
            slow[int(at // bucket_s)] = slow.get(int(at // bucket_s), 0) + 1
    if slow:
        spans = ", ".join(f"{k * bucket_s:g}-{(k + 1) * bucket_s:g} s: {n}" for k, n in sorted(slow.items()))
        print(f"  look-ups over {FIND_P99_TARGET_MS:g} ms by when they were sent (from the first): {spans}")


def report_load(report: Report, tally: Tally, idle_p99: float, load_average: float) -> None:
    wrong = checkpoints_not_one(tally.guards)
    not_exact = [rid for rid, (want, got) in tally.recovered.items() if want != got]
    intact = reap_once_and_verify()
    left = sessions_left()
    for what in tally.failed[:10]:
        print(f"  failed: {what}")
    for what in wrong[:10]:
        print(f"  not one checkpoint: {what}")
    report.add("failed calls", len(tally.failed), "", target=0, note=f"of {tally.calls} calls")
    report.add("VPG-changes without exactly one tagged checkpoint", len(wrong), "", target=0)
    report.add("recoveries not byte-exact", len(not_exact), "", target=0, note=f"of {len(tally.recovered)}")
    report.add("our FLR sessions left after one reap", left, "", target=0)
    report.add("audit chain broken", 0 if intact else 1, "", target=0)
    report.add(
        "ZVM requests in the busiest second",
        busiest_second(),
        "req",
        target=CAP,
        note="arrivals as the simulator counts them, on a host whose load average was "
        f"{load_average:.1f} on {os.cpu_count()} cores: a request sent in its slot may reach a busy simulator late",
    )
    slow = sum(1 for ms in tally.find_ms if ms > FIND_P99_TARGET_MS)
    print_slow_finds(tally)
    report.add(
        "zerto_find_protection p99 under load",
        p99(tally.find_ms),
        "ms",
        target=FIND_P99_TARGET_MS,
        reference=idle_p99,
        reference_name="p99 on the idle stack, cache warm",
        note=f"{slow} of {len(tally.find_ms)} look-ups over {FIND_P99_TARGET_MS:g} ms; "
        f"load average {load_average:.1f} on {os.cpu_count()} cores",
    )


# --- soak ----------------------------------------------------------------------------------------------
def _rss_kib(pid: int) -> int:
    """RSS of ``pid`` and its descendants."""
    total = 0
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":", 1) for line in status.read_text().splitlines() if ":" in line)
        except OSError:
            continue
        if int(status.parent.name) == pid or _descends(int(status.parent.name), pid):
            total += int(fields.get("VmRSS", "0 kB").split()[0])
    return total


def _descends(pid: int, ancestor: int) -> bool:
    for _ in range(10):
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
        if pid == ancestor:
            return True
        if pid <= 1:
            return False
    return False


def _fds(pid: int) -> int:
    with contextlib.suppress(OSError):
        return len(os.listdir(f"/proc/{pid}/fd"))
    return -1


def snapshot(shape: Shape) -> dict[str, Any]:
    from django.apps import apps
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()")
        pg_connections = cursor.fetchone()[0]
    redis = subprocess.run(
        ["redis-cli", "-p", str(shape.redis_port), "info", "clients"], capture_output=True, text=True, check=True
    ).stdout
    clients = int(next(ln for ln in redis.splitlines() if ln.startswith("connected_clients:")).split(":")[1])
    tables = {m._meta.db_table: m._default_manager.count() for m in apps.get_models() if m._meta.managed}
    procs = shape.processes()
    return {
        "rss_kib": {name: _rss_kib(pid) for name, pid in procs.items()},
        "fds": {name: _fds(pid) for name, pid in procs.items()},
        "pg_connections": pg_connections,
        "redis_clients": clients,
        "tables": tables,
    }


# Tables whose rows retention (or the code) keeps bounded: they must not grow with time.
BOUNDED = (
    "rewind_workerheartbeat",
    "rewind_sitepoller",
    "rewind_mcpratecount",
    "rewind_zvmratewindow",
    "rewind_zvmtoken",
    "rewind_sitecircuit",
    "rewind_upstreamlink",
    "recoveries_flrlisting",
)


async def soak_run(
    shape: Shape, args: argparse.Namespace, tokens: list[str], vms: list[str], tally: Tally, minutes: float
) -> None:
    """The load's mix at a tenth of its rate, for ``minutes``: one of its units every few seconds."""
    load = Load(shape, tally)
    end = time.monotonic() + minutes * 60
    agents = tokens[: args.agents]
    # The full load starts ~(agents + same + gateway) units within a few seconds; a tenth of that
    # rate, one unit every this many seconds.
    every = max(0.5, 10 * 5.0 / max(1, args.agents + args.gateway))
    running: set[asyncio.Task[None]] = set()
    for n in itertools.count():
        if time.monotonic() >= end:
            break
        token, vm = agents[n % len(agents)], vms[n % len(vms)]
        unit: Awaitable[None]
        if n % 5 == 0:
            unit = load.guard_and_recover(token, vm, f"SOAK-{n}-{os.getpid()}", recover=n % 4 == 0)
        elif n % 5 in (1, 2):
            unit = load.gateway(token, vm)
        else:
            unit = load.finds(token, 4, vms)
        task: asyncio.Task[None] = asyncio.ensure_future(unit)
        running.add(task)
        task.add_done_callback(running.discard)
        await asyncio.sleep(every)
    await asyncio.gather(*running)


def report_soak(report: Report, before: dict[str, Any], after: dict[str, Any], tally: Tally) -> None:
    print(f"\n{'process':<12} {'RSS start':>10} {'RSS end':>10} {'growth':>8}   {'fds start':>9} {'fds end':>8}")
    worst = 0.0
    for name in sorted(before["rss_kib"]):
        start, end = before["rss_kib"][name], after["rss_kib"].get(name, 0)
        growth = (end - start) / start * 100 if start else float("nan")
        if name != "simulator":  # the stand-in ZVMs keep every checkpoint and session: theirs grows
            worst = max(worst, growth)
        print(
            f"{name:<12} {start / 1024:>8.1f} MB {end / 1024:>8.1f} MB {growth:>7.1f} %"
            f"   {before['fds'][name]:>9} {after['fds'].get(name, -1):>8}"
        )
    print(f"PostgreSQL connections: {before['pg_connections']} at start, {after['pg_connections']} at the end")
    print(f"Redis clients:          {before['redis_clients']} at start, {after['redis_clients']} at the end")
    print(f"\n{'table':<36} {'rows start':>10} {'rows end':>10}   bounded by retention")
    grew = []
    for table in sorted(before["tables"]):
        start, end = before["tables"][table], after["tables"][table]
        bounded = table in BOUNDED
        if bounded and end > max(start * 2, start + 50):
            grew.append(table)
        print(f"{table:<36} {start:>10} {end:>10}   {'yes' if bounded else ''}")
    fds_grew = sum(max(0, after["fds"].get(n, 0) - before["fds"][n]) for n in before["fds"])
    report.add("soak: failed calls", len(tally.failed), "", target=0, note=f"of {tally.calls} calls")
    report.add("soak: largest memory growth of a process", worst, "%", target=10.0, note="the simulator's aside")
    report.add("soak: file descriptors gained, all processes", fds_grew, "", target=20, note="printed per process")
    report.add(
        "soak: PostgreSQL connections at the end",
        after["pg_connections"],
        "",
        target=PG_CONNECTIONS_BOUND,
        reference=before["pg_connections"],
        reference_name="after the warm-up",
        note="the bound is what the pools may hold: they fill as load reaches more of their threads",
    )
    report.add("soak: Redis clients gained", after["redis_clients"] - before["redis_clients"], "", target=5)
    report.add("soak: bounded tables that kept growing", len(grew), "", target=0, note=", ".join(grew))


@contextlib.contextmanager
def production_shape(work: Path, vms: int) -> Iterator[Shape]:
    with contextlib.ExitStack() as stack:
        yield Shape(stack, work, vms)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--agents", type=int, default=50, help="agents guarding a VM each (default 50)")
    parser.add_argument("--same-change", type=int, default=50, help="guards of web01 with one change id (50)")
    parser.add_argument("--recoveries", type=int, default=20, help="recoveries approved over REST (20)")
    parser.add_argument("--gateway", type=int, default=20, help="agents calling the upstream through the gateway (20)")
    parser.add_argument("--finds", type=int, default=300, help="zerto_find_protection calls measured (300)")
    parser.add_argument("--soak-minutes", type=float, default=0.0, help="soak for this long instead (30 is the soak)")
    parser.add_argument("--work", type=Path, default=WORK, help=f"the state folder, emptied first (default {WORK})")
    args = parse_args(parser, QUICK)
    report = Report("load" if not args.soak_minutes else "soak", args)
    work = fresh_dir(args.work)
    # About one filler VM in seven is a Linux VM whose VPGs all sit at the two demo sites.
    with production_shape(work, max(200, 8 * args.agents)) as shape:
        start_guestshell(shape, work)
        tokens = make_tokens(args.agents + 2 + args.gateway)
        vms = eligible_vms(max(args.agents, 1))
        print(f"production shape up: replicas {shape.url(0)} and {shape.url(1)}; {len(tokens)} agents", flush=True)
        idle = idle_find_p99(shape, tokens[-1], vms, min(100, args.finds))
        for vm in vms:
            set_guest_file(vm, "release 0\n")  # a file to read through the gateway from the start
        if args.soak_minutes:
            # Pools fill and caches warm in the first minutes: measured from after them.
            warm = Tally()
            asyncio.run(soak_run(shape, args, tokens, vms, warm, min(WARM_UP_MIN, args.soak_minutes / 5)))
            before = snapshot(shape)
            tally = Tally()
            began = time.monotonic()
            asyncio.run(soak_run(shape, args, tokens, vms, tally, args.soak_minutes))
            print(f"soak: {tally.calls} calls in {(time.monotonic() - began) / 60:.1f} min", flush=True)
            for what in (warm.failed + tally.failed)[:10]:
                print(f"  failed: {what}")
            report_soak(report, before, snapshot(shape), tally)
        else:
            began = time.monotonic()
            tally = asyncio.run(load_run(shape, args, tokens, vms))
            print(f"load: {tally.calls} calls in {time.monotonic() - began:.1f} s", flush=True)
            report_load(report, tally, idle, os.getloadavg()[0])
    print()
    for f in report.figures:
        target = f" (target {'≤' if f.better == 'lower' else '≥'} {f.target:g})" if f.target is not None else ""
        beside = f"; {f.reference_name} {f.reference:.1f} {f.unit}" if f.reference is not None else ""
        verdict = "" if f.met is None else ("  met" if f.met else "  NOT MET")
        median = f" {f.unit}" if f.unit else ""
        print(f"{f.name}: {f.value:g}{median}{target}{beside}{verdict}{'  (' + f.note + ')' if f.note else ''}")
    report.write()


if __name__ == "__main__":
    main()
