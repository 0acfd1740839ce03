#!/usr/bin/env python
"""Benchmark: the MCP rate limit as an external client sees it.

    .venv/bin/python bench/ratelimit.py [--limit 600] [--rate 20] [--seconds 70] [--workers 2] [--redis URL]
                                        [--quick] [--json F]

A fresh state folder (SQLite) under var/bench-ratelimit, an agent with a token, the app under
uvicorn with ``--workers`` workers and ``MCP_RATE_LIMIT_PER_MINUTE=--limit`` (counted in the
database, or in Redis with ``--redis``). One client sends ``tools/list`` POSTs paced at
``--rate`` a second for ``--seconds``, each on its own connection (either worker may take it),
and records when it sent each and what came back. Prints the calls accepted in the first 20 s and
the first 60 s, the most accepted in any 60 s by the client's clock (send times and answer times),
the refusals and the Retry-After values they gave. No thresholds are asserted: the figure to read
is the most in any 60 s beside the limit, its target (``make bench`` prints it with the others;
``--quick`` sends 4 a second for 65 s against a limit of 120).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the repository must be importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench._common import REPO, django_setup, fresh_dir
from bench.figures import Report, parse_args
from bench.mcp_find import make_agent, start_uvicorn

MINUTE = 60.0
QUICK = {"limit": 120, "rate": 4.0, "seconds": 65.0}
BODY = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}).encode()


def most_in_any_minute(times: list[float]) -> int:
    most, start = 0, 0
    for end, at in enumerate(times):
        while at - times[start] > MINUTE:
            start += 1
        most = max(most, end - start + 1)
    return most


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit", type=int, default=600)
    parser.add_argument("--rate", type=float, default=20.0, help="calls a second the client sends")
    parser.add_argument("--seconds", type=float, default=70.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--redis", default="", help="REDIS_URL for the count (default: the database)")
    args = parse_args(parser, QUICK)
    report = Report("ratelimit", args, shape=" (Redis)" if args.redis else "")

    work = fresh_dir(REPO / "var" / "bench-ratelimit")
    django_setup(work)
    import os

    import httpx2

    token = make_agent()
    env = {**os.environ, "MCP_RATE_LIMIT_PER_MINUTE": str(args.limit), "REDIS_URL": args.redis}
    proc, url = start_uvicorn("app", "rewind.asgi:application", env, work, args.workers)
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-11-25",
        "Authorization": f"Bearer {token}",
        "Connection": "close",
    }
    sent: list[tuple[float, float, int, str]] = []  # (sent, answered, status, retry-after)

    def call(start: float) -> None:
        at = time.monotonic() - start
        resp = httpx2.post(url, content=BODY, headers=headers, timeout=30)
        sent.append((at, time.monotonic() - start, resp.status_code, resp.headers.get("retry-after", "")))

    try:
        # Each call on a thread of its own at its due time: a slow answer does not hold back the pace.
        with ThreadPoolExecutor(max_workers=16) as pool:
            start = time.monotonic()
            for i in range(int(args.rate * args.seconds)):
                time.sleep(max(0.0, start + i / args.rate - time.monotonic()))
                pool.submit(call, start)
    finally:
        proc.stop(timeout=15)
    sent.sort()

    ok = [s for s in sent if s[2] == 200]
    refused = [s for s in sent if s[2] == 429]
    other = len(sent) - len(ok) - len(refused)
    counter = f"Redis ({args.redis})" if args.redis else "the database"
    print(f"limit {args.limit} a minute, {args.workers} workers, counted in {counter}")
    print(f"client: {len(sent)} calls at {args.rate:g}/s over {sent[-1][0]:.1f} s")
    print(
        f"accepted: {len(ok)} ({len([s for s in ok if s[0] < 20])} in the first 20 s, "
        f"{len([s for s in ok if s[0] < 60])} in the first 60 s); refused (429): {len(refused)}; other: {other}"
    )
    by_send, by_answer = most_in_any_minute([s[0] for s in ok]), most_in_any_minute(sorted(s[1] for s in ok))
    print(f"most accepted in any 60 s: {by_send} by send time, {by_answer} by answer time (limit {args.limit})")
    waits = sorted({int(s[3]) for s in refused if s[3].isdigit()})
    if waits:
        print(f"Retry-After given: {waits[0]}..{waits[-1]} s")
    for clock, most in (("send", by_send), ("answer", by_answer)):
        report.add(
            f"rate limit: most calls accepted in any 60 s by the client's {clock} times",
            most,
            "calls",
            target=float(args.limit),
            reference=args.limit,
            reference_name="the limit (MCP_RATE_LIMIT_PER_MINUTE)",
        )
    # The limit is also a floor a client may rely on: a window holds the whole limit, not less.
    report.add(
        "rate limit: calls accepted in the first 60 s",
        len([s for s in ok if s[0] < MINUTE]),
        "calls",
        better="higher",
        target=float(min(args.limit, int(args.rate * MINUTE))),
        reference=args.limit,
        reference_name="the limit (MCP_RATE_LIMIT_PER_MINUTE)",
    )
    report.add("rate limit: answers other than 200 and 429", other, "calls", target=0)
    report.write()


if __name__ == "__main__":
    main()
