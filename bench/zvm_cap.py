#!/usr/bin/env python
"""Benchmark: what the per-ZVM request cap costs, how well it holds, and logins per process.

One client's requests per second with no cap, a cap too high to bite (the cost of counting alone) and the
default, counted in the database and, when a Redis answers, in Redis; then --processes worker processes at the
default cap, the most requests the simulator saw in any one second and the logins they made.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: the repository must be importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench._common import PYTHON, REPO, django_setup, fresh_dir, sim_control, start_sim
from bench.figures import Report, parse_args
from zvmsim.auth import PASSWORD

STATE = REPO / "var" / "bench-zvm-cap"
SLUG = "site-a"
TOKEN_CALL = "POST /auth/realms/zerto/protocol/openid-connect/token"
DEFAULT_CAP = 10.0


def _redis_url(configured: str | None) -> str | None:
    import redis

    url = configured or "redis://127.0.0.1:6379/7"
    try:
        redis.Redis.from_url(url, socket_connect_timeout=1).ping()
    except redis.RedisError:
        return None
    return url


def _flush_redis(url: str) -> None:
    import redis

    from rewind.sites.zvm_shared import CLAIM_PREFIX, RATE_PREFIX, TOKEN_PREFIX

    client = redis.Redis.from_url(url)
    for prefix in (RATE_PREFIX, TOKEN_PREFIX, CLAIM_PREFIX):
        for key in client.scan_iter(match=prefix + "*"):
            client.delete(key)


class Bench:
    def __init__(self, sim_url: str, redis_url: str | None) -> None:
        self.sim_url = sim_url
        self.redis_url = redis_url
        self.control = sim_control()
        state = self.control.get(f"{sim_url}/_sim/state", timeout=30).json()
        self.site_name = next(s["name"] for s in state["sites"] if s["slug"] == SLUG)

    def reset(self, store: str) -> None:
        """A fresh simulator (no tokens, counters at 0) and empty shared stores."""
        from rewind.models import ZvmRateWindow, ZvmToken

        self.control.post(f"{self.sim_url}/_sim/reset", timeout=30).raise_for_status()
        ZvmRateWindow.objects.all().delete()
        ZvmToken.objects.all().delete()
        if store != "db":
            _flush_redis(store)

    def sim_get(self, what: str) -> dict[str, Any]:
        resp = self.control.get(f"{self.sim_url}/_sim/sites/{SLUG}/{what}", timeout=30)
        resp.raise_for_status()
        return dict(resp.json())

    def stores(self, store: str) -> Any:
        from rewind.sites.zvm_shared import db_stores, redis_stores
        from rewind.zvm import Stores

        pacer, tokens = (db_stores() if store == "db" else redis_stores(store))[:2]
        return Stores(pacer=pacer, tokens=tokens)

    def single(self, store: str, cap: float | None, calls: int) -> float:
        """Requests per second one process makes, after its login and the cap's first burst (not counted)."""
        from rewind.zvm import ZvmClient, ZvmConnection

        self.reset(store)
        conn = ZvmConnection(
            site_name=self.site_name,
            base_url=f"{self.sim_url}/{SLUG}",
            username="admin",
            password=PASSWORD,
            max_requests_per_s=cap,
        )
        client = ZvmClient(conn, stores=self.stores(store))
        client.local_site()  # the login, out of the timing
        if cap is not None and cap < calls:
            for _ in range(int(cap)):  # the burst an idle ZVM takes, out of the timing: steady state only
                client.local_site()
        started = time.perf_counter()
        for _ in range(calls):
            client.local_site()
        elapsed = time.perf_counter() - started
        client.close()
        return calls / elapsed

    def many(self, store: str, processes: int, each: int) -> dict[str, Any]:
        """``processes`` processes at the default cap: the simulator's peak second, total and logins."""
        self.reset(store)
        go_at = time.time() + 3.0 + processes  # every process has set Django up by then
        target = "db" if store == "db" else store
        cmd = [
            PYTHON,
            "-m",
            "tests.sites.zvm_cap_worker",
            target,
            f"{self.sim_url}/{SLUG}",
            self.site_name,
            str(DEFAULT_CAP),
            str(each),
            str(go_at),
        ]
        procs = [
            subprocess.Popen(
                cmd, cwd=REPO, env={**os.environ}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
            for _ in range(processes)
        ]
        reports = []
        for proc in procs:
            out, err = proc.communicate(timeout=600)
            if proc.returncode != 0:
                raise SystemExit(f"a worker failed: {err[-2000:]}")
            reports.append(json.loads(out.strip().splitlines()[-1]))
        rate = self.sim_get("rate")
        return {
            "peak": rate["peak_per_s"],
            "requests": rate["requests"],
            "logins": int(self.sim_get("calls").get(TOKEN_CALL, 0)),
            "ok": sum(r["ok"] for r in reports),
            "errors": sum(len(r["errors"]) for r in reports),
            "seconds": max(r["seconds"] for r in reports),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=300, help="calls per single-process run without a biting cap")
    parser.add_argument("--capped-calls", type=int, default=40, help="calls per single-process run at the default cap")
    parser.add_argument("--processes", type=int, default=4, help="processes sharing one site's cap")
    parser.add_argument("--each", type=int, default=15, help="calls per process in the shared run")
    args = parse_args(parser, quick={"calls": 150, "capped_calls": 25, "each": 10})
    figures = Report("zvm_cap", args)

    redis_url = _redis_url(os.environ.get("REDIS_URL"))
    work = fresh_dir(STATE)
    django_setup(work, ZVM_MAX_REQUESTS_PER_S=str(DEFAULT_CAP))
    sim, sim_url = start_sim(work)
    try:
        bench = Bench(sim_url, redis_url)
        stores = ["db"] + ([redis_url] if redis_url else [])
        print(f"ZVM request cap, one site of the simulator ({sim_url}); default cap {DEFAULT_CAP:g}/s")
        print(
            "Redis: "
            + (
                "database 7 of the local server"
                if redis_url and not os.environ.get("REDIS_URL")
                else "REDIS_URL"
                if redis_url
                else "none answers: database only"
            )
        )
        print("\n1 process, back-to-back GET /v1/localsite (requests/s)")
        print(f"  {'store':<8} {'no cap':>9} {'cap 1000':>9} {'cap 10':>9}")
        for store in stores:
            name = "database" if store == "db" else "redis"
            off = bench.single(store, None, args.calls)
            high = bench.single(store, 1000.0, args.calls)
            default = bench.single(store, DEFAULT_CAP, args.capped_calls)
            print(f"  {name:<8} {off:>9.1f} {high:>9.1f} {default:>9.2f}")
            figures.add(
                f"one process, cap counted in {name}: requests/s under a cap that does not bite",
                high,
                "/s",
                better="higher",
                reference=off,
                reference_name="no cap",
            )
            figures.add(
                f"one process, cap counted in {name}: requests/s at the default cap",
                default,
                "/s",
                better="higher",
                reference=DEFAULT_CAP,
                reference_name="the cap",
            )
        print(f"\n{args.processes} processes x {args.each} calls at the default cap (each its own client)")
        print(
            f"  {'store':<8} {'peak in 1 s':>11} {'cap':>5} {'requests':>9} {'ok':>5} {'errors':>6} "
            f"{'logins':>6} {'seconds':>8}"
        )
        for store in stores:
            name = "database" if store == "db" else "redis"
            r = bench.many(store, args.processes, args.each)
            print(
                f"  {name:<8} {r['peak']:>11} {DEFAULT_CAP:>5g} {r['requests']:>9} {r['ok']:>5} "
                f"{r['errors']:>6} {r['logins']:>6} {r['seconds']:>8.2f}"
            )
            figures.add(
                f"{args.processes} processes, cap in {name}: peak requests in any 1 s", r["peak"], target=DEFAULT_CAP
            )
            figures.add(f"{args.processes} processes, cap in {name}: logins", r["logins"], target=1)
        figures.write()
    finally:
        sim.stop()


if __name__ == "__main__":
    main()
