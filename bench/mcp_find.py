#!/usr/bin/env python
"""Benchmark: zerto_find_protection over /mcp beside a bare MCP SDK echo server.

For each inventory size (--vms) the app under uvicorn is measured with the look-up cache on and off, beside a
bare SDK echo server and beside the floor (``bench/_find_floor.py``: the same app with its audit rows never
written, so what a fail-closed audit row costs is measured, not estimated). N clients loop 2026-07-28
``tools/call`` POSTs over the same 100 VM names at every size; ratios are medians of each round's ratio to the
echo measured beside it, since the machine is shared. No thresholds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import socket
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp.server import MCPServer
from mcp.server.transport_security import TransportSecuritySettings

if __package__ in (None, ""):  # run as a script: the repository must be importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench._common import (
    PRODUCTION_HELP,
    PRODUCTION_SHAPE,
    PYTHON,
    REPO,
    START_TIMEOUT,
    Proc,
    ProcessError,
    django_setup,
    free_port,
    fresh_dir,
    production_servers,
    register_sites,
    sim_control,
    start_sim,
)
from bench.figures import Report, parse_args, spread_of

PROTOCOL = "2026-07-28"
HANDSHAKE_PROTOCOL = "2025-11-25"


# --- the bare SDK server (uvicorn --factory bench.mcp_find:echo_app) ----------------------------
async def echo(text: str) -> str:
    """Return the text."""
    return text


def echo_app() -> Any:
    server = MCPServer(name="echo")
    server.tool()(echo)
    return server.streamable_http_app(
        stateless_http=True,
        json_response=False,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )


def echo_handshake_app() -> Any:
    """The same echo, speaking only the handshake era (2025-11-25) with sessions, as most servers do."""
    from tests.gateway.guestshell import HandshakeOnly

    server = MCPServer(name="echo")
    server.tool()(echo)
    app = server.streamable_http_app(
        stateless_http=False,
        json_response=False,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    return HandshakeOnly(app)


def serve_echo_stdio() -> None:
    """The same echo over stdin/stdout, as a stdio upstream runs (``python -c`` starts it)."""
    server = MCPServer(name="echo")
    server.tool()(echo)
    server.run("stdio")


# --- processes ------------------------------------------------------------------------------------
def start_uvicorn(
    name: str, target: str, env: dict[str, str], work: Path, workers: int, factory: bool = False
) -> tuple[Proc, str]:
    port = free_port()
    cmd = [
        PYTHON,
        "-m",
        "uvicorn",
        target,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        str(workers),
        "--no-access-log",
        "--log-level",
        "warning",
        "--timeout-graceful-shutdown",
        "3",
    ]
    if factory:
        cmd.append("--factory")
    proc = Proc(name, cmd, log=work / f"{name}.log", cwd=REPO, env=env)

    def listens() -> bool:
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    # --log-level warning hides the startup line; poll the port instead.
    try:
        proc.wait_until(listens, what="listening", timeout=START_TIMEOUT)
    except ProcessError:
        proc.stop(timeout=15)
        raise
    time.sleep(1.0 if workers > 1 else 0.3)  # let every worker finish its startup
    return proc, f"http://127.0.0.1:{port}/mcp"


# --- Django-side setup (in this process, on the bench's own state folder) ------------------------
def make_agent() -> str:
    from django.contrib.auth import get_user_model

    from rewind.agents import agent_create, agent_token_issue
    from rewind.audit import Actor

    owner, _ = get_user_model().objects.get_or_create(username="bench-owner", defaults={"is_superuser": True})
    agent = agent_create(actor=Actor.system("bench"), name=f"bench-{int(time.time())}", owner=owner)
    return agent_token_issue(actor=Actor.system("bench"), agent=agent).token


# --- load -------------------------------------------------------------------------------------------
@dataclass
class Result:
    label: str
    calls: int
    errors: int
    seconds: float
    latencies_ms: list[float]
    sent: int = 0  # every call, warm-up included
    zvm_calls: int | None = None
    server_cpu_s: float | None = None

    @property
    def rps(self) -> float:
        return self.calls / self.seconds

    def pct(self, q: float) -> float:
        if not self.latencies_ms:
            return float("nan")
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    def line(self) -> str:
        zvm = f", {self.zvm_calls / self.sent:.2f} ZVM calls per lookup" if self.zvm_calls is not None else ""
        cpu = f", server CPU {self.cpu_ms_per_call:.2f} ms/call" if self.server_cpu_s is not None else ""
        return (
            f"{self.label:<44} {self.rps:8.1f} req/s   p50 {self.pct(0.50):7.1f} ms   "
            f"p99 {self.pct(0.99):7.1f} ms   ({self.calls} calls, {self.errors} errors{cpu}{zvm})"
        )

    @property
    def cpu_ms_per_call(self) -> float:
        return (self.server_cpu_s or 0.0) * 1000 / max(1, self.sent)


def call_body(rpc_id: int, tool: str, arguments: dict[str, Any], *, handshake: bool = False) -> bytes:
    """A ``tools/call``; at 2026-07-28 its ``_meta`` names the revision, in the handshake era the session did."""
    params: dict[str, Any] = {"name": tool, "arguments": arguments}
    if not handshake:
        params["_meta"] = {
            "io.modelcontextprotocol/protocolVersion": PROTOCOL,
            "io.modelcontextprotocol/clientCapabilities": {},
        }
    return json.dumps({"jsonrpc": "2.0", "id": rpc_id, "method": "tools/call", "params": params}).encode()


async def handshake_session(http: Any, url: str, headers: dict[str, str]) -> dict[str, str]:
    """Open a handshake-era session (``initialize``, then ``notifications/initialized``) and
    return the headers each of its calls carries: the session id (none from a stateless server) and
    the negotiated revision."""
    hello = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": HANDSHAKE_PROTOCOL,
            "capabilities": {},
            "clientInfo": {"name": "bench", "version": "1"},
        },
    }
    opening = {k: v for k, v in headers.items() if not k.lower().startswith("mcp-")}
    resp = await http.post(url, content=json.dumps(hello).encode(), headers=opening)
    if resp.status_code != 200:
        raise RuntimeError(f"initialize failed: HTTP {resp.status_code}: {resp.text[:300]}")
    session = {**opening, "MCP-Protocol-Version": HANDSHAKE_PROTOCOL}
    if session_id := resp.headers.get("mcp-session-id"):
        session["Mcp-Session-Id"] = session_id
    done = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode()
    await http.post(url, content=done, headers=session)
    return session


def call_ok(status: int, text: str) -> bool:
    if status != 200:
        return False
    if text.startswith("event:") or text.startswith("data:") or "\ndata:" in text:
        text = [ln[5:] for ln in text.splitlines() if ln.startswith("data:") and ln[5:].strip()][-1]
    answer = json.loads(text)
    return "result" in answer and not answer["result"].get("isError", False)


async def load(
    label: str,
    url: str,
    token: str | None,
    tool: str,
    arguments: Callable[[int], dict[str, Any]],
    clients: int,
    seconds: float,
    warmup: float,
    *,
    handshake: bool = False,
) -> Result:
    """``clients`` loops of ``tools/call`` POSTs; ``handshake``: each client in a session of its own."""
    import httpx2

    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": PROTOCOL,
        "Mcp-Method": "tools/call",
        "Mcp-Name": tool,
    }
    if token:
        headers["Authorization"] = f"Bearer {token}"
    counter = itertools.count(1)
    latencies: list[float] = []
    errors = 0
    first_error: list[str] = []
    start = time.monotonic()
    measure_from, end = start + warmup, start + warmup + seconds

    async def client(http: Any) -> None:
        nonlocal errors
        sent_with = await handshake_session(http, url, headers) if handshake else headers
        while (now := time.monotonic()) < end:
            n = next(counter)
            t0 = time.perf_counter()
            body = call_body(n, tool, arguments(n), handshake=handshake)
            resp = await http.post(url, content=body, headers=sent_with)
            ms = (time.perf_counter() - t0) * 1000
            ok = call_ok(resp.status_code, resp.text)
            if now >= measure_from:
                if ok:
                    latencies.append(ms)
                else:
                    errors += 1
            if not ok and not first_error:
                first_error.append(f"HTTP {resp.status_code}: {resp.text[:300]}")

    limits = httpx2.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx2.AsyncClient(limits=limits, timeout=60.0) as http:
        await asyncio.gather(*(client(http) for _ in range(clients)))
    if first_error:
        print(f"  first error in {label}: {first_error[0]}", file=sys.stderr)
    return Result(label, len(latencies), errors, seconds, latencies, sent=next(counter) - 1)


def zvm_calls(sim_url: str) -> int:
    """/v1 calls the simulator served for the two registered sites (its call counters)."""
    total = 0
    with sim_control() as control:
        for slug in ("site-a", "site-b"):
            counts = control.get(f"{sim_url}/_sim/sites/{slug}/calls", timeout=10).json()
            total += sum(int(v) for v in counts.values())
    return total


# --- the run ------------------------------------------------------------------------------------------
def merged(label: str, parts: list[Result]) -> Result:
    """The rounds of one phase as one result: calls and seconds summed, latencies pooled."""
    return Result(
        label,
        sum(r.calls for r in parts),
        sum(r.errors for r in parts),
        sum(r.seconds for r in parts),
        [ms for r in parts for ms in r.latencies_ms],
        sent=sum(r.sent for r in parts),
        zvm_calls=None if parts[0].zvm_calls is None else sum(r.zvm_calls or 0 for r in parts),
        server_cpu_s=sum(r.server_cpu_s or 0.0 for r in parts),
    )


# The app's phases: the lookup cache on and off, and the floor (cache on, its audit rows never written).
FLOOR = "floor"
PHASES = {"on": "cache on", "off": "cache off", FLOOR: "cache on, audit rows unwritten (floor)"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=4.0, help="measured time per phase and round")
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="rounds of echo, find with the cache on and find with it off, per inventory size",
    )
    parser.add_argument("--warmup", type=float, default=1.5)
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="uvicorn workers for the app and for echo (1: no accept imbalance between workers)",
    )
    parser.add_argument("--vms", default="100,10000", help="inventory sizes (filler VMs), comma-separated")
    parser.add_argument("--names", type=int, default=100, help="distinct VM names the calls rotate over")
    parser.add_argument(
        "--production",
        action="store_true",
        help=PRODUCTION_HELP + " (the rate count in Redis)",
    )
    args = parse_args(parser, quick={"vms": "100", "rounds": 2, "seconds": 2.0, "warmup": 1.0})
    figures = Report("mcp_find", args, shape=PRODUCTION_SHAPE if args.production else "")

    work = fresh_dir(REPO / "var" / "bench-mcp")
    with contextlib.ExitStack() as stack:
        servers = production_servers(stack, work) if args.production else {}
        measure(args, work, servers, figures)


def measure(args: argparse.Namespace, work: Path, servers: dict[str, str], figures: Report) -> None:
    django_setup(work / "state", **servers)
    token = make_agent()
    # The per-agent rate limit would cut a benchmark short; it is not what is measured here.
    env = {
        **os.environ,
        "REWIND_VAR_DIR": str(work / "state"),
        "PYTHONUNBUFFERED": "1",
        "MCP_RATE_LIMIT_PER_MINUTE": "100000000",
    }
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    names = [f"vm-{i:05d}" for i in range(1, args.names + 1)]

    def run(
        label: str,
        server: Proc,
        url: str,
        tok: str | None,
        tool: str,
        arguments: Callable[[int], dict[str, Any]],
        sim_url: str | None = None,
    ) -> Result:
        before = zvm_calls(sim_url) if sim_url else 0
        cpu_before = server.cpu_seconds()
        result = asyncio.run(load(label, url, tok, tool, arguments, args.clients, args.seconds, args.warmup))
        result.server_cpu_s = server.cpu_seconds() - cpu_before
        if sim_url:
            result.zvm_calls = zvm_calls(sim_url) - before
        print(result.line(), flush=True)
        return result

    print(
        f"clients={args.clients} seconds={args.seconds} rounds={args.rounds} workers={args.workers} "
        f"cores={os.cpu_count()} shape={'PostgreSQL + Redis' if servers else 'SQLite, rate count in the database'}",
        flush=True,
    )
    # Echo is the yardstick: each round measures echo, then find with the cache on and off, so a
    # slow spell of the shared machine hits both sides of a ratio; ratios are medians of rounds.
    echo_proc, echo_url = start_uvicorn("echo", "bench.mcp_find:echo_app", env, work, args.workers, factory=True)
    sizes = [int(v) for v in args.vms.split(",")]
    parts: dict[tuple[int, str], list[Result]] = {}
    try:
        for vms in sizes:
            sim, sim_url = start_sim(work, "--vms", str(vms), name=f"zvmsim-{vms}")
            apps: dict[str, tuple[Proc, str]] = {}
            try:
                register_sites(sim_url, ("site-a", "site-b"))
                for cache, target, app_env in (
                    ("on", "rewind.asgi:application", env),
                    ("off", "rewind.asgi:application", {**env, "REWIND_LOOKUP_CACHE_S": "0"}),
                    (FLOOR, "bench._find_floor:application", env),
                ):
                    apps[cache] = start_uvicorn(f"app-{vms}-cache-{cache}", target, app_env, work, args.workers)
                for n in range(1, args.rounds + 1):
                    parts.setdefault((vms, "echo"), []).append(
                        run(
                            f"echo (bare SDK, no auth, no DB) #{n}",
                            echo_proc,
                            echo_url,
                            None,
                            "echo",
                            lambda i: {"text": f"hello {i}"},
                        )
                    )
                    for cache, (app, app_url) in apps.items():
                        parts.setdefault((vms, cache), []).append(
                            run(
                                f"find_protection {vms} VMs, {PHASES[cache]} #{n}",
                                app,
                                app_url,
                                token,
                                "zerto_find_protection",
                                lambda i: {"vm": names[i % len(names)]},
                                sim_url,
                            )
                        )
            finally:
                for app, _ in apps.values():
                    app.stop()
                sim.stop()
    finally:
        echo_proc.stop()
    report(sizes, parts, figures)
    figures.write()


def report_floor(vms: int, parts: dict[tuple[int, str], list[Result]], figures: Report, ratios: list[float]) -> None:
    """What the look-up's audit row costs: its CPU per call beside the floor's, whose rows are never written."""
    rounds = [
        (f.cpu_ms_per_call, u.cpu_ms_per_call) for f, u in zip(parts[(vms, "on")], parts[(vms, FLOOR)], strict=True)
    ]
    writes = [real - floor for real, floor in rounds]
    print(
        f"the same without writing its audit rows (bench/_find_floor.py): find/echo {statistics.median(ratios):.2f} "
        f"(rounds: {' '.join(f'{x:.2f}' for x in ratios)}); the rows' write {statistics.median(writes):.3f} ms "
        f"of CPU per look-up (rounds: {' '.join(f'{real:.2f} vs {floor:.2f}' for real, floor in rounds)})"
    )
    figures.add(
        f"find_protection at {vms} VMs, cache on, its audit rows unwritten (a floor): throughput over the echo's",
        statistics.median(ratios),
        "x",
        better="higher",
        spread=spread_of(ratios),
        note="bench/_find_floor.py: the same app and path, the audit writer's transaction skipped",
    )
    figures.add(
        f"find_protection at {vms} VMs, cache on: its audit row's write, CPU per look-up",
        statistics.median(writes),
        "ms",
        reference=statistics.median(real for real, _ in rounds),
        reference_name="the look-up's whole CPU",
        spread=spread_of(writes),
    )


def report(sizes: list[int], parts: dict[tuple[int, str], list[Result]], figures: Report) -> None:
    def to_echo(vms: int, cache: str) -> list[float]:
        """find/echo throughput of each round at ``vms``."""
        return [f.rps / e.rps for f, e in zip(parts[(vms, cache)], parts[(vms, "echo")], strict=True)]

    print("\nall rounds together:")
    for vms in sizes:
        print(merged(f"echo beside {vms} VMs", parts[(vms, "echo")]).line())
        for cache in PHASES:
            print(merged(f"find_protection {vms} VMs, {PHASES[cache]}", parts[(vms, cache)]).line())
    print()
    for vms in sizes:
        find, echo = merged("", parts[(vms, "on")]), merged("", parts[(vms, "echo")])
        ratios = to_echo(vms, "on")
        print(
            f"find/echo throughput at {vms} VMs (cache on): {statistics.median(ratios):.2f} "
            f"(rounds: {' '.join(f'{x:.2f}' for x in ratios)}); server CPU per call "
            f"{find.cpu_ms_per_call / echo.cpu_ms_per_call:.2f}x echo; find p99 {find.pct(0.99):.1f} ms"
        )
        figures.add(
            f"find_protection at {vms} VMs, cache on: throughput over the echo's",
            statistics.median(ratios),
            "x",
            better="higher",
            target=0.5,
            spread=spread_of(ratios),
            note="the echo does no work of ours; each look-up also has its rate count shared by every "
            "process, its audit row committed before the answer (fail-closed) and the sites' fingerprint read; "
            "with the audit rows left unwritten (bench/_find_floor.py) the look-up reaches the figure below",
        )
        report_floor(vms, parts, figures, to_echo(vms, FLOOR))
        off = merged("", parts[(vms, "off")])
        off_rounds = [r.cpu_ms_per_call for r in parts[(vms, "off")]]
        figures.add(
            f"find_protection at {vms} VMs, cache off: server CPU per look-up",
            off.cpu_ms_per_call,
            "ms",
            reference=echo.cpu_ms_per_call,
            reference_name="echo's per call",
            spread=spread_of(off_rounds),
        )
        figures.add(
            f"find_protection at {vms} VMs, cache off: ZVM calls per look-up",
            (off.zvm_calls or 0) / max(1, off.sent),
        )
    if len(sizes) > 1:
        small, large = min(sizes), max(sizes)
        for cache in ("on", "off"):
            # Each size's throughput relative to the echo measured beside it: the machine's pace
            # between the two sizes' runs cancels out.
            cost = statistics.median(to_echo(small, cache)) / statistics.median(to_echo(large, cache))
            a, b = merged("", parts[(small, cache)]), merged("", parts[(large, cache)])
            print(
                f"cost per call {large} vs {small} VMs (cache {cache}): {cost:.2f}x against echo "
                f"(raw throughput {a.rps / b.rps:.2f}x, p50 {b.pct(0.5) / a.pct(0.5):.2f}x, "
                f"server CPU per call {b.cpu_ms_per_call / a.cpu_ms_per_call:.2f}x)"
            )


if __name__ == "__main__":
    main()
