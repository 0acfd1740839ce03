#!/usr/bin/env python
"""Benchmark: calls through the gateway beside the same calls made straight to the upstream.

On a state folder of its own (or ``--production``), the guest shell over streamable HTTP as the upstream. A
pass-through call through /mcp beside ``read_file`` straight to the guest shell, alternating phases over
--rounds (a slow spell of the shared machine then hits both sides), with --clients and with one, each with the
CPU every server spent per call; then a guarded call beside the guard alone plus the direct call, in alternating
order, as a guard's ZVM calls queue behind the one before in the site's cap. ``--handshake`` makes the upstream
speak only the handshake era. Targets and what was measured with it: the benchmarks page.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import statistics
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: the repository must be importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench._common import (
    PRODUCTION_HELP,
    PRODUCTION_SHAPE,
    PYTHON,
    REPO,
    START_TIMEOUT,
    Proc,
    django_setup,
    fresh_dir,
    production_servers,
    register_sites,
    start_sim,
    start_worker,
)
from bench.figures import Report, parse_args, spread_of
from bench.mcp_find import PROTOCOL, Result, call_body, call_ok, load, make_agent, start_uvicorn
from rewind.lib.processes import free_port, port_free

GUEST_READY = "guestshell ready on "
HANDSHAKE_SHAPE = " (handshake-era upstream)"  # after each figure's name with --handshake
# What the gateway's own CPU per forwarded call is made of (py-spy --gil of the gateway, 1 client),
# for the table's "what bounds them": its figures are in the closing notes of issue 26.
FORWARD_BOUND = (
    "the SDK's server path (bench/mcp_find.py's echo: its whole CPU per call), the SDK's client "
    "session of the gateway's link, and the safety "
    "writes of every call: the shared rate count, the decision audited before forwarding, the "
    "outcome audited after"
)
NGINX = "/etc/nginx/nginx.conf"


def start_guest_shell(work: Path, sim_url: str, token: str, *, handshake: bool = False) -> tuple[Proc, str]:
    cmd = [
        PYTHON, "-m", "tests.gateway.guestshell", "--http", "--port", "0", "--sim-url", sim_url,
        "--ca-bundle", str(work / "certs" / "ca.pem"), "--token", token, *(["--stateful"] if handshake else []),
    ]  # fmt: skip
    proc = Proc("guestshell", cmd, log=work / "guestshell.log", cwd=REPO, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    out = proc.wait_for_output(GUEST_READY, timeout=START_TIMEOUT)
    return proc, out.split(GUEST_READY, 1)[1].split()[0]


def add_upstream(url: str, token: str) -> None:
    from catalog.services import mutating_tool_add
    from rewind.audit import Actor
    from rewind.gateway.listing import upstream_tools_refresh
    from rewind.gateway.services import upstream_create, upstream_tools_approve_listed

    actor = Actor.user("bench")
    upstream = upstream_create(actor=actor, name="guestshell", url=url, headers={"Authorization": f"Bearer {token}"})
    upstream_tools_refresh(upstream)
    upstream_tools_approve_listed(actor=actor, upstream=upstream)
    mutating_tool_add(actor=actor, pattern="guestshell/exec", vm_arg="host", description="bench")


def cpu_of(procs: dict[str, Proc]) -> dict[str, float]:
    return {name: proc.cpu_seconds() for name, proc in procs.items()}


def cpu_line(spent: dict[str, float], calls: int) -> str:
    return "; CPU ms/call " + ", ".join(f"{name} {s * 1000 / max(1, calls):.2f}" for name, s in spent.items())


@dataclass(frozen=True)
class CpuPerCall:
    """The servers' CPU per call in one round: the gateway's own G, and the upstream's U (guest shell + simulator).

    With every client queued for the same cores, calls go at most as fast as their CPU allows,
    so the p50 ratio gateway/direct tends to (G + U) / U: the CPU bound. The load generator's
    own CPU is left out on both sides.
    """

    own: float
    upstream: float

    @property
    def bound(self) -> float:
        return (self.own + self.upstream) / self.upstream


def cpu_per_call(samples: dict[str, list[dict[str, float]]], clients: int) -> list[CpuPerCall]:
    """Each round's CPU per call (ms), the gateway's from its phase and the upstream's from the direct one."""
    direct, gateway = (
        samples[f"direct read_file, {clients} clients"],
        samples[f"gateway guestshell__read_file, {clients} clients"],
    )
    return [
        CpuPerCall(own=g["gateway"], upstream=d["guest shell"] + d["simulator"])
        for d, g in zip(direct, gateway, strict=True)
    ]


def cpu_line_of(rounds: list[CpuPerCall], clients: int) -> str:
    own, upstream = statistics.median(r.own for r in rounds), statistics.median(r.upstream for r in rounds)
    return (
        f"CPU per call, {clients} clients: the gateway's own {own:.2f} ms beside the upstream's {upstream:.2f} ms "
        f"(guest shell + simulator, direct): CPU-bound ratio (G + U) / U = {(own + upstream) / upstream:.2f}"
    )


def report_pass_through(
    report: Report, clients: int, direct: list[Result], gateway: list[Result], rounds: list[CpuPerCall], *, single: bool
) -> None:
    """The pass-through figures of one client count: the gateway's CPU per call, and its p50 beside the direct one's."""
    own = [r.own for r in rounds]
    report.add(
        f"pass-through, {clients} client{'s' if clients > 1 else ''}: the gateway's own CPU per call",
        statistics.median(own),
        "ms",
        target=3.0,
        reference=statistics.median(r.upstream for r in rounds),
        reference_name="the upstream's (guest shell + simulator)",
        spread=spread_of(own),
        note=FORWARD_BOUND,
    )
    if single:
        extras = [g.pct(0.5) - d.pct(0.5) for g, d in zip(gateway, direct, strict=True)]
        report.add(
            "pass-through, 1 client: p50 added by the gateway",
            statistics.median(extras),
            "ms",
            target=5.0,
            reference=statistics.median(d.pct(0.5) for d in direct),
            reference_name="direct p50",
            spread=spread_of(extras),
            note="the gateway's own CPU per call, spent on the call's way there and back: " + FORWARD_BOUND,
        )
        return
    # With the cores setting the pace, the ratio cannot beat the bound its CPU implies; within 10 % of it.
    to_bound = [g.pct(0.5) / d.pct(0.5) / r.bound for g, d, r in zip(gateway, direct, rounds, strict=True)]
    report.add(
        f"pass-through, {clients} clients: p50 ratio gateway/direct over its CPU bound",
        statistics.median(to_bound),
        "x",
        target=1.10,
        spread=spread_of(to_bound),
        note="the CPU bound is (gateway's own + upstream's CPU) / upstream's, per call",
    )


@dataclass
class Proxy:
    """A pass-through a user would pick instead of the gateway, in front of the same guest shell."""

    name: str
    proc: Proc
    url: str
    handshake: bool  # speaks only the handshake era: each client opens a session
    note: str
    results: list[Result] = field(default_factory=list)


PY1 = REPO / "var" / "upstreams" / "py1" / "bin"
PY2 = REPO / "var" / "upstreams" / "py2" / "bin"
FASTMCP_PROXY = "fastmcp proxy"
FASTMCP_PROXY_KEPT = "fastmcp proxy, kept session"
MCP_PROXY = "mcp-proxy"


def start_proxies(work: Path, shell_url: str, shell_token: str, sim_url: str) -> list[Proxy]:
    """FastMCP's proxy (fastmcp 4.x) in front of the guest shell over HTTP, and mcp-proxy (on the SDK 1.x)
    in front of it over stdio, as each is meant to be used; none when ``make upstreams`` has not run."""
    if not (PY2 / "python").exists() or not (PY1 / "mcp-proxy").exists():
        print("no proxies to compare with: run `make upstreams` first", flush=True)
        return []
    fast = [start_fastmcp_proxy(work, shell_url, shell_token, keep) for keep in (False, True)]
    port2 = free_port()
    # setsid: the stdio guest shell in a process group of its own, so mcp-proxy's CPU is its own.
    child = ["setsid", PYTHON, "-m", "tests.gateway.guestshell", "--stdio", "--sim-url", sim_url,
             "--ca-bundle", str(work / "certs" / "ca.pem")]  # fmt: skip
    stdio = Proc(
        MCP_PROXY,
        [str(PY1 / "mcp-proxy"), "--port", str(port2), "--stateless", "-e", "PYTHONPATH", str(REPO), "--", *child],
        log=work / "mcp-proxy.log",
        cwd=REPO,
    )
    stdio.wait_until(lambda: not port_free(port2), what="mcp-proxy listening", timeout=START_TIMEOUT)
    mcp_proxy = Proxy(
        MCP_PROXY,
        stdio,
        f"http://127.0.0.1:{port2}/mcp",
        True,
        "mcp-proxy 0.13.0 (SDK 1.30) before the stdio guest shell",
    )
    return [*fast, mcp_proxy]


def start_fastmcp_proxy(work: Path, shell_url: str, shell_token: str, keep_session: bool) -> Proxy:
    name = FASTMCP_PROXY_KEPT if keep_session else FASTMCP_PROXY
    port = free_port()
    argv = [str(PY2 / "python"), str(REPO / "bench" / "_fastmcp_proxy.py"), "--upstream", shell_url,
            "--token", shell_token, "--port", str(port), *(["--keep-session"] if keep_session else [])]  # fmt: skip
    proc = Proc(name, argv, log=work / f"{name.replace(' ', '-').replace(',', '')}.log", cwd=REPO)
    proc.wait_until(lambda: not port_free(port), what=f"{name} listening", timeout=START_TIMEOUT)
    how = "one session kept (a connected client)" if keep_session else "a session per request (its default)"
    return Proxy(name, proc, f"http://127.0.0.1:{port}/mcp", False, f"fastmcp.server.create_proxy 4.2.3, {how}")


def report_proxies(
    report: Report,
    samples: dict[str, list[dict[str, float]]],
    direct: list[Result],
    gateway: list[Result],
    proxies: list[Proxy],
) -> None:
    """The gateway's own CPU per call and p50 added, 1 client, beside the pass-throughs a user would pick."""
    own = [g["gateway"] for g in samples["gateway guestshell__read_file, 1 clients"]]
    gateway_extra = [g.pct(0.5) - d.pct(0.5) for g, d in zip(gateway, direct, strict=True)]
    for proxy in proxies:
        theirs = [s[proxy.name] for s in samples[f"{proxy.name} read_file, 1 clients"]]
        extra = [p.pct(0.5) - d.pct(0.5) for p, d in zip(proxy.results, direct, strict=True)]
        ratio = [o / t for o, t in zip(own, theirs, strict=True)]
        report.add(
            f"pass-through, 1 client: the gateway's own CPU per call over {proxy.name}'s",
            statistics.median(ratio),
            "x",
            target=1.5 if proxy.name == FASTMCP_PROXY_KEPT else None,
            reference=statistics.median(theirs),
            reference_name=f"{proxy.name}'s own CPU per call (ms)",
            spread=spread_of(ratio),
            note=f"{proxy.note}; the gateway also decides, audits and checks the schema of every call",
        )
        beyond = [g - e for g, e in zip(gateway_extra, extra, strict=True)]
        report.add(
            f"pass-through, 1 client: p50 the gateway adds beyond {proxy.name}'s",
            statistics.median(beyond),
            "ms",
            target=3.0 if proxy.name == FASTMCP_PROXY_KEPT else None,
            reference=statistics.median(extra),
            reference_name=f"p50 {proxy.name} adds to the direct call",
            spread=spread_of(beyond),
            note=proxy.note,
        )
        print(
            f"{proxy.name}: CPU per call {statistics.median(theirs):.2f} ms (the gateway's own "
            f"{statistics.median(own):.2f} ms, {statistics.median(ratio):.2f}x); p50 added "
            f"{statistics.median(extra):.1f} ms (the gateway's {statistics.median(gateway_extra):.1f} ms)",
            flush=True,
        )


def recorded() -> tuple[int, int]:
    """Gateway calls that ended ok, and ``mcp.tool.called`` audit rows, so far in the run's database."""
    from rewind.audit.actions import McpAction
    from rewind.gateway.models import GatewayCall
    from rewind.models import AuditEvent

    ended_ok = GatewayCall.objects.filter(outcome=GatewayCall.Outcome.OK).count()
    return ended_ok, AuditEvent.objects.filter(action=McpAction.TOOL_CALLED).count()


def check_recorded(label: str, sent: int, before: tuple[int, int], after: tuple[int, int]) -> None:
    """Every call through the gateway left its call row ended ok and its audit row (its answers alone could
    not tell that it did the work measured)."""
    calls, audited = after[0] - before[0], after[1] - before[1]
    if calls != sent or audited != sent:
        raise RuntimeError(f"{label}: {sent} calls answered, but {calls} gateway calls ended ok and {audited} audited")


async def one_call(url: str, token: str, tool: str, arguments: dict[str, Any], rpc_id: int) -> float:
    """One ``tools/call`` POST, its wall time in ms; raises when the answer is an error."""
    import httpx2

    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": PROTOCOL,
        "Mcp-Method": "tools/call",
        "Mcp-Name": tool,
        "Authorization": f"Bearer {token}",
    }
    async with httpx2.AsyncClient(timeout=120.0) as http:
        t0 = time.perf_counter()
        resp = await http.post(url, content=call_body(rpc_id, tool, arguments), headers=headers)
        ms = (time.perf_counter() - t0) * 1000
    if not call_ok(resp.status_code, resp.text):
        raise RuntimeError(f"{tool} failed: HTTP {resp.status_code}: {resp.text[:400]}")
    return ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=float, default=1.5)
    parser.add_argument(
        "--guarded", type=int, default=8, help="guarded calls (and guards alone) measured; 0 skips part 2"
    )
    parser.add_argument("--production", action="store_true", help=PRODUCTION_HELP)
    parser.add_argument(
        "--handshake",
        action="store_true",
        help="the upstream speaks only the handshake era (2025-11-25, a session per client), as most servers do",
    )
    args = parse_args(parser, quick={"seconds": 2.0, "rounds": 2, "warmup": 1.0, "guarded": 4})
    shape = (PRODUCTION_SHAPE if args.production else "") + (HANDSHAKE_SHAPE if args.handshake else "")
    report = Report("gateway", args, shape=shape)

    work = fresh_dir(REPO / "var" / "bench-gateway")
    with contextlib.ExitStack() as stack:
        servers = production_servers(stack, work) if args.production else {}
        django_setup(work / "state", MCP_RATE_LIMIT_PER_MINUTE="100000000", **servers)
        measure(args, work, report, database="PostgreSQL, Redis" if servers else "SQLite")


def measure(args: argparse.Namespace, work: Path, report: Report, database: str) -> None:
    procs: list[Proc] = []
    try:
        sim, sim_url = start_sim(work, "--vms", "50")
        procs.append(sim)
        register_sites(sim_url, ["site-a", "site-b"])
        shell_token = "bench-upstream-token"
        shell, shell_url = start_guest_shell(work, sim_url, shell_token, handshake=args.handshake)
        procs.append(shell)
        add_upstream(shell_url, shell_token)
        token = make_agent()
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        app, app_url = start_uvicorn("app", "rewind.asgi:application", env, work, workers=1)
        procs.append(app)
        procs.append(start_worker(work, concurrency=2, name="bench-gateway"))
        proxies = start_proxies(work, shell_url, shell_token, sim_url) if not args.handshake else []
        procs += [p.proc for p in proxies]
        print(
            f"clients={args.clients} seconds={args.seconds} rounds={args.rounds} cores={os.cpu_count()} "
            f"database={database}",
            flush=True,
        )
        read = {"host": "web01", "path": NGINX}
        servers_cpu = {"gateway": app, "guest shell": shell, "simulator": sim, **{p.name: p.proc for p in proxies}}
        samples: dict[str, list[dict[str, float]]] = defaultdict(list)
        for clients in (args.clients, 1):
            direct: list[Result] = []
            gateway: list[Result] = []
            for _ in range(args.rounds):
                for label, url, tok, tool, out, handshake in (
                    (
                        f"direct read_file, {clients} clients",
                        shell_url,
                        shell_token,
                        "read_file",
                        direct,
                        args.handshake,
                    ),
                    (
                        f"gateway guestshell__read_file, {clients} clients",
                        app_url,
                        token,
                        "guestshell__read_file",
                        gateway,
                        False,  # agents speak 2026-07-28 to the gateway either way
                    ),
                    *(
                        (f"{p.name} read_file, 1 clients", p.url, None, "read_file", p.results, p.handshake)
                        for p in (proxies if clients == 1 else [])
                    ),
                ):
                    before, recorded_before = cpu_of(servers_cpu), recorded()
                    result = asyncio.run(
                        load(
                            label,
                            url,
                            tok,
                            tool,
                            lambda _n: read,
                            clients,
                            args.seconds,
                            args.warmup,
                            handshake=handshake,
                        )
                    )
                    spent = {name: cpu - before[name] for name, cpu in cpu_of(servers_cpu).items()}
                    print(result.line() + cpu_line(spent, result.sent), flush=True)
                    if url == app_url:
                        check_recorded(label, result.sent, recorded_before, recorded())
                    out.append(result)
                    samples[label].append({name: s * 1000 / max(1, result.sent) for name, s in spent.items()})
            ratios = [g.pct(0.5) / d.pct(0.5) for g, d in zip(gateway, direct, strict=True)]
            extras = [g.pct(0.5) - d.pct(0.5) for g, d in zip(gateway, direct, strict=True)]
            extra = statistics.median(extras)
            rounds = cpu_per_call(samples, clients)
            bounds = [r.bound for r in rounds]
            print(
                f"pass-through p50 ratio gateway/direct, {clients} clients: {statistics.median(ratios):.2f} "
                f"(+{extra:.1f} ms; rounds: {', '.join(f'{r:.2f}' for r in ratios)}; "
                f"the CPU bound {statistics.median(bounds):.2f})",
                flush=True,
            )
            print(cpu_line_of(rounds, clients) + "\n", flush=True)
            report_pass_through(report, clients, direct, gateway, rounds, single=clients == 1)
            if clients == 1 and proxies:
                report_proxies(report, samples, direct, gateway, proxies)

        if args.guarded and not args.handshake:  # what a guard costs does not depend on the upstream's era
            measure_guarded(args, app_url, token, shell_url, shell_token, report)
        report.write()
    finally:
        for proc in reversed(procs):
            proc.stop(timeout=15)


def measure_guarded(
    args: argparse.Namespace, app_url: str, token: str, shell_url: str, shell_token: str, report: Report
) -> None:
    """Part 2: the guarded call through the gateway beside a guard alone and the direct call."""
    ids = itertools.count(1)
    guard_ms: list[float] = []
    exec_ms: list[float] = []
    guarded_ms: list[float] = []
    for i in range(args.guarded):
        command = f"echo bench-{i} > /tmp/bench-{i}"
        guard_args = {
            "tool": "guestshell/exec",
            "arguments": {"host": "web01", "command": command},
            "action": f"bench {i}",
        }
        exec_args: dict[str, Any] = {"host": "web01", "command": command}
        calls: list[tuple[list[float], str, str, str, dict[str, Any]]] = [
            (guard_ms, app_url, token, "zerto_guard_before_mutate", guard_args),
            (exec_ms, shell_url, shell_token, "exec", exec_args),
            (guarded_ms, app_url, token, "guestshell__exec", exec_args),
        ]
        # Every other round the guarded call goes first: a guard's calls queue behind the last
        # guard's in the site's request cap, so in a fixed order the second one always waits.
        for times_ms, url, tok, tool, arguments in calls if i % 2 == 0 else calls[::-1]:
            times_ms.append(asyncio.run(one_call(url, tok, tool, arguments, next(ids))))
    g, e, c = (statistics.median(v) for v in (guard_ms, exec_ms, guarded_ms))
    print(f"\nguard alone          p50 {g:8.1f} ms   ({', '.join(f'{v:.0f}' for v in guard_ms)})")
    print(f"exec direct          p50 {e:8.1f} ms")
    print(f"guestshell__exec     p50 {c:8.1f} ms   ({', '.join(f'{v:.0f}' for v in guarded_ms)})")
    print(f"guarded call / (guard alone + direct call): {c / (g + e):.3f} (target ≤ 1.10)", flush=True)
    report.add(
        "guarded call through the gateway, p50",
        c,
        "ms",
        target=1.10 * (g + e),
        reference=g + e,
        reference_name="guard alone + direct call",
    )


if __name__ == "__main__":
    main()
