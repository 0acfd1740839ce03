#!/usr/bin/env python
"""Benchmark: what the gateway would save by relaying a call's JSON-RPC message itself.

    .venv/bin/python bench/relay.py [--calls 1500] [--rounds 3] [--quick] [--json F]

The gateway forwards a tool call through the official SDK's client (``rewind.gateway.links``):
session, dispatcher, streamable HTTP transport, message validation. Issue 26 asks whether
posting the JSON-RPC message ourselves over a pooled connection would be cheaper. This measures
the two clients side by side against the bare SDK echo server (``bench.mcp_find.echo_app``,
its own uvicorn process), one call after another, alternating rounds:

- the SDK client: one ``Client`` session, ``call_tool("echo", …)`` each time;
- the relay: the same 2026-07-28 ``tools/call`` POSTed with httpx on one kept-alive connection,
  its answer parsed from JSON or SSE into the SDK's ``CallToolResult`` (what the gateway returns).

Printed: this process's CPU per call for each, their difference (what relaying would take off the
gateway's own CPU per call, today 5-6 ms in bench/gateway.py), and the wall p50 of each. No
thresholds are asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
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


async def sdk_client(url: str, calls: int) -> tuple[float, float]:
    """CPU per call (ms) and the wall p50 (ms) of ``calls`` calls through the SDK's client."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async with httpx2.AsyncClient() as http, Client(streamable_http_client(url, http_client=http)) as client:
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


async def _timed(calls: int, call: Any) -> tuple[float, float]:
    walls = []
    cpu = time.process_time()
    for i in range(calls):
        started = time.perf_counter()
        await call(i)
        walls.append((time.perf_counter() - started) * 1000)
    return (time.process_time() - cpu) / calls * 1000, statistics.median(walls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=1500, help="calls per client per round (1500)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, each client once per round (3)")
    args = parse_args(parser, QUICK)
    report = Report("relay", args)
    work = fresh_dir(REPO / "var" / "bench-relay")
    import os

    proc, url = start_uvicorn("echo", "bench.mcp_find:echo_app", dict(os.environ), work, 1, factory=True)
    sdk: list[tuple[float, float]] = []
    raw: list[tuple[float, float]] = []
    try:
        for n in range(args.rounds):
            sdk.append(asyncio.run(sdk_client(url, args.calls)))
            raw.append(asyncio.run(relay(url, args.calls)))
            print(
                f"round {n + 1}: SDK client {sdk[-1][0]:.2f} ms CPU/call (p50 {sdk[-1][1]:.2f} ms), "
                f"relay {raw[-1][0]:.2f} ms CPU/call (p50 {raw[-1][1]:.2f} ms)",
                flush=True,
            )
    finally:
        proc.stop(timeout=15)
    sdk_cpu, raw_cpu = statistics.median(c for c, _ in sdk), statistics.median(c for c, _ in raw)
    saved = [s[0] - r[0] for s, r in zip(sdk, raw, strict=True)]
    report.add(
        "client CPU per call, relaying the JSON-RPC message",
        raw_cpu,
        "ms",
        reference=sdk_cpu,
        reference_name="through the SDK's client",
        spread=spread_of([c for c, _ in raw]),
    )
    report.add(
        "what relaying would take off the gateway's CPU per call",
        statistics.median(saved),
        "ms",
        better="higher",
        spread=spread_of(saved),
        note="of the gateway's own 5-6 ms per pass-through call (bench/gateway.py)",
    )
    report.add(
        "wall p50 per call, relaying",
        statistics.median(w for _, w in raw),
        "ms",
        reference=statistics.median(w for _, w in sdk),
        reference_name="through the SDK's client",
    )
    print()
    for f in report.figures:
        beside = f"; {f.reference_name} {f.reference:.2f} {f.unit}" if f.reference is not None else ""
        print(f"{f.name}: {f.value:.2f} {f.unit}{beside}{'  (' + f.note + ')' if f.note else ''}")
    report.write()


if __name__ == "__main__":
    main()
