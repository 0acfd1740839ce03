#!/usr/bin/env python
"""Benchmark: what the gateway's client spends per forwarded call, eleven ways side by side.

    .venv/bin/python bench/relay.py [--calls 1500] [--rounds 3] [--quick] [--json F]

The gateway forwards a tool call through a link (``rewind.gateway.links``): the official SDK's
client session, and below it, for an HTTP upstream, a ``tools/call`` posted by the
gateway itself (``rewind.gateway.relay``) instead of the SDK's dispatcher, streamable HTTP
transport and httpx client. This measures eleven clients against the bare SDK echo server
(``bench.mcp_find.echo_app``, its own uvicorn process, and the same server speaking only the
handshake era with a session, ``bench.mcp_find.echo_handshake_app``), one call after another,
alternating in each round:

- the SDK client over httpx's own transport (httpcore and h11), as the gateway first forwarded;
- the SDK client over ``rewind.gateway.wire`` (kept-alive HTTP/1.1 on asyncio streams);
- a bare relay: the same 2026-07-28 ``tools/call`` POSTed with httpx (its own transport) on one
  kept-alive connection, its answer parsed from JSON or SSE into the SDK's ``CallToolResult``;
- a bare relay on the wire: the same messages handed straight to ``rewind.gateway.wire``, with
  neither the SDK's session nor httpx's client above it: the floor of any relay;
- the gateway's link as it forwards now (the SDK's session, the relay below it, a progress
  callback as every forwarded call has), and the same link with ``REWIND_GATEWAY_RELAY=false``;
- the same two links to the handshake-era server (2025-11-25, a session id on every call);
- the same two links to the same echo over stdio (``bench.mcp_find.serve_echo_stdio``, started by
  the link as a stdio upstream is), and a bare relay on the pipes of such a child: each call one
  line written and one line read, the floor of any stdio relay.

Printed: this process's CPU per call for each, what the relay takes off the link's CPU per call,
what the relayed stdio link spends above the bare relay on the pipes, what the wire and the bare
relays take off the first client's, and the wall p50 of each. No thresholds are asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: the repository must be importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench._common import REPO, fresh_dir
from bench.figures import Report, parse_args, spread_of
from bench.mcp_find import call_body, start_uvicorn

QUICK = {"calls": 300, "rounds": 2}
WARM_UP = 50


async def sdk_client(url: str, calls: int, *, wire: bool) -> tuple[float, float]:
    """CPU per call (ms) and the wall p50 (ms) of ``calls`` calls through the SDK's client.

    ``wire``: over ``rewind.gateway.wire``'s transport (the gateway's), else over httpx's own."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    from rewind.gateway.wire import KeptAliveTransport

    transport = KeptAliveTransport() if wire else None
    http = httpx2.AsyncClient(transport=transport)
    async with http, Client(streamable_http_client(url, http_client=http)) as client:
        for _ in range(WARM_UP):
            await client.call_tool("echo", {"text": "hi"})
        return await _timed(calls, lambda i: client.call_tool("echo", {"text": "hi"}))


async def relay(url: str, calls: int) -> tuple[float, float]:
    """The same calls posted as JSON-RPC messages on one kept-alive connection, answers parsed."""
    import httpx2
    from mcp_types import CallToolResult

    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    async with httpx2.AsyncClient(headers=headers) as http:

        async def one(i: int) -> CallToolResult:
            resp = await http.post(url, content=call_body(i, "echo", {"text": "hi"}))
            text = resp.text
            if resp.headers.get("content-type", "").startswith("text/event-stream"):
                text = [ln[5:] for ln in text.splitlines() if ln.startswith("data:") and ln[5:].strip()][-1]
            return CallToolResult.model_validate(json.loads(text)["result"])

        for i in range(WARM_UP):
            await one(i)
        return await _timed(calls, one)


async def relay_on_wire(url: str, calls: int) -> tuple[float, float]:
    """The same messages handed straight to ``rewind.gateway.wire``'s transport: no SDK client, no
    httpx client (its headers, timeouts, hooks and redirects), only a request, its bytes and its answer."""
    import httpx2
    from mcp_types import CallToolResult

    from rewind.gateway.wire import KeptAliveTransport

    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    timeouts = {"connect": 5.0, "read": 30.0, "write": 5.0, "pool": 5.0}
    transport = KeptAliveTransport()

    async def one(i: int) -> CallToolResult:
        body = call_body(i, "echo", {"text": "hi"})
        request = httpx2.Request("POST", url, headers=headers, content=body, extensions={"timeout": timeouts})
        resp = await transport.handle_async_request(request)
        raw = await resp.aread()
        if resp.headers.get("content-type", "").startswith("text/event-stream"):
            lines = raw.decode().splitlines()
            raw = [ln[5:] for ln in lines if ln.startswith("data:") and ln[5:].strip()][-1].encode()
        return CallToolResult.model_validate(json.loads(raw)["result"])

    async with transport:
        for i in range(WARM_UP):
            await one(i)
        return await _timed(calls, one)


# The same echo over stdio, started as the gateway starts a stdio upstream (only the SDK's safe
# variables are passed on, so the repository is named in PYTHONPATH).
STDIO = "stdio"
STDIO_COMMAND = (sys.executable, "-c", "from bench.mcp_find import serve_echo_stdio; serve_echo_stdio()")
STDIO_ENV = (("PYTHONPATH", str(REPO)),)


def _spec(url: str) -> Any:
    from rewind.gateway.links import UpstreamSpec

    stdio = url == STDIO
    return UpstreamSpec(
        pk=1,
        name="echo",
        transport="stdio" if stdio else "http",
        url="" if stdio else url,
        headers=(),
        command=STDIO_COMMAND if stdio else (),
        env=STDIO_ENV if stdio else (),
        connect_timeout_s=5.0,
        call_timeout_s=30.0,
        version="1",
    )


async def gateway_link(url: str, calls: int, *, relay: bool) -> tuple[float, float]:
    """The gateway's own ``Link`` (its session, its progress callback, as ``forward._send`` calls it),
    relaying ``tools/call`` itself (``rewind.gateway.relay``) or, with ``REWIND_GATEWAY_RELAY=false``, not;
    over stdio when ``url`` is ``STDIO``."""
    from rewind.gateway.links import Link

    link = Link(_spec(url), relay=relay)

    async def progress(progress: float, total: float | None, message: str | None) -> None:
        return None

    try:
        for _ in range(WARM_UP):
            await link.call_tool("echo", {"text": "hi"}, progress)
        assert (link.relay is not None) == relay, "the link did not take the path asked for"
        return await _timed(calls, lambda i: link.call_tool("echo", {"text": "hi"}, progress))
    finally:
        link.discard()
        await asyncio.sleep(0.05)  # let the session's task close its connections


async def relay_on_pipe(url: str, calls: int) -> tuple[float, float]:
    """The floor of any stdio relay: each ``tools/call`` written as one line to the child's stdin and
    its answer read as one line from its stdout, parsed into the SDK's ``CallToolResult``; no SDK client."""
    from mcp_types import CallToolResult

    child = await asyncio.create_subprocess_exec(
        *STDIO_COMMAND,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        env={"PATH": os.environ.get("PATH", ""), **dict(STDIO_ENV)},
    )
    assert child.stdin is not None, "started with a pipe"
    assert child.stdout is not None, "started with a pipe"
    stdin, stdout = child.stdin, child.stdout

    async def one(i: int) -> CallToolResult:
        stdin.write(call_body(i, "echo", {"text": "hi"}) + b"\n")
        await stdin.drain()
        while True:  # a server may log or notify on the same pipe: the answer is the line with our id
            message = json.loads(await stdout.readline())
            if message.get("id") == i:
                return CallToolResult.model_validate(message["result"])

    try:
        for i in range(WARM_UP):
            await one(i)
        return await _timed(calls, one)
    finally:
        stdin.close()
        await child.wait()


async def _timed(calls: int, call: Any) -> tuple[float, float]:
    walls = []
    cpu = time.process_time()
    for i in range(calls):
        started = time.perf_counter()
        await call(i)
        walls.append((time.perf_counter() - started) * 1000)
    return (time.process_time() - cpu) / calls * 1000, statistics.median(walls)


# Each client, and the server it calls: the echo at 2026-07-28, or at the handshake era.
ARMS: dict[str, tuple[str, Any]] = {
    "SDK client over httpx's transport": ("echo", lambda url, calls: sdk_client(url, calls, wire=False)),
    "SDK client over rewind.gateway.wire": ("echo", lambda url, calls: sdk_client(url, calls, wire=True)),
    "relay over httpx": ("echo", relay),
    "relay on rewind.gateway.wire": ("echo", relay_on_wire),
    "the gateway's link, relayed": ("echo", lambda url, calls: gateway_link(url, calls, relay=True)),
    "the gateway's link, not relayed": ("echo", lambda url, calls: gateway_link(url, calls, relay=False)),
    "the gateway's link at the handshake era, relayed": (
        "handshake",
        lambda url, calls: gateway_link(url, calls, relay=True),
    ),
    "the gateway's link at the handshake era, not relayed": (
        "handshake",
        lambda url, calls: gateway_link(url, calls, relay=False),
    ),
    "the gateway's link over stdio, relayed": (STDIO, lambda url, calls: gateway_link(url, calls, relay=True)),
    "the gateway's link over stdio, not relayed": (STDIO, lambda url, calls: gateway_link(url, calls, relay=False)),
    "a bare relay on the stdio pipes": (STDIO, relay_on_pipe),
}
BEFORE, GATEWAY, RELAY, RAW, LINK, LINK_SDK, OLD_LINK, OLD_LINK_SDK, PIPE_LINK, PIPE_LINK_SDK, PIPE_RAW = ARMS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=1500, help="calls per client per round (1500)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, each client once per round (3)")
    args = parse_args(parser, QUICK)
    report = Report("relay", args)
    work = fresh_dir(REPO / "var" / "bench-relay")
    servers = {
        name: start_uvicorn(name, f"bench.mcp_find:{app}", dict(os.environ), work, 1, factory=True)
        for name, app in (("echo", "echo_app"), ("handshake", "echo_handshake_app"))
    }
    urls = {name: url for name, (_, url) in servers.items()} | {STDIO: STDIO}
    runs: dict[str, list[tuple[float, float]]] = {arm: [] for arm in ARMS}
    try:
        for n in range(args.rounds):
            for arm, (server, client) in ARMS.items():
                runs[arm].append(asyncio.run(client(urls[server], args.calls)))
            said = ", ".join(f"{arm} {r[-1][0]:.2f} ms CPU/call (p50 {r[-1][1]:.2f} ms)" for arm, r in runs.items())
            print(f"round {n + 1}: {said}", flush=True)
    finally:
        for proc, _ in servers.values():
            proc.stop(timeout=15)
    cpu = {arm: statistics.median(c for c, _ in r) for arm, r in runs.items()}
    for link, unrelayed, era in (
        (LINK, LINK_SDK, ""),
        (OLD_LINK, OLD_LINK_SDK, " at the handshake era"),
        (PIPE_LINK, PIPE_LINK_SDK, " over stdio"),
    ):
        saved_by_relay = [b[0] - a[0] for b, a in zip(runs[unrelayed], runs[link], strict=True)]
        report.add(
            f"client CPU per call, the gateway's link{era}",
            cpu[link],
            "ms",
            reference=cpu[unrelayed],
            reference_name="the same link with REWIND_GATEWAY_RELAY=false",
            spread=spread_of([c for c, _ in runs[link]]),
            note=f"the relay takes off {statistics.median(saved_by_relay):.2f} ms per call",
        )
    above_the_floor = [b[0] - a[0] for b, a in zip(runs[PIPE_LINK], runs[PIPE_RAW], strict=True)]
    report.add(
        "client CPU per call, the gateway's link over stdio, above a bare relay on the pipes",
        statistics.median(above_the_floor),
        "ms",
        spread=spread_of(above_the_floor),
        note=f"{PIPE_RAW}: {cpu[PIPE_RAW]:.2f} ms per call",
    )
    for arm in (GATEWAY, RELAY, RAW):
        report.add(
            f"client CPU per call, {arm}",
            cpu[arm],
            "ms",
            reference=cpu[BEFORE],
            reference_name=BEFORE,
            spread=spread_of([c for c, _ in runs[arm]]),
        )
    for arm in (GATEWAY, RELAY, RAW):
        saved = [b[0] - a[0] for b, a in zip(runs[BEFORE], runs[arm], strict=True)]
        report.add(
            f"client CPU per call taken off by the {arm.removeprefix('SDK client over ')}",
            statistics.median(saved),
            "ms",
            better="higher",
            spread=spread_of(saved),
            note="beside the gateway's own CPU per pass-through call (bench/gateway.py)",
        )
    for arm in (GATEWAY, RELAY, RAW):
        report.add(
            f"wall p50 per call, {arm}",
            statistics.median(w for _, w in runs[arm]),
            "ms",
            reference=statistics.median(w for _, w in runs[BEFORE]),
            reference_name=BEFORE,
        )
    print()
    for f in report.figures:
        beside = f"; {f.reference_name} {f.reference:.2f} {f.unit}" if f.reference is not None else ""
        print(f"{f.name}: {f.value:.2f} {f.unit}{beside}{'  (' + f.note + ')' if f.note else ''}")
    report.write()


if __name__ == "__main__":
    main()
