#!/usr/bin/env python
"""Benchmark: how long a guard takes beside the time the ZVM needs, and 3 VPGs beside 1.

    .venv/bin/python bench/guard.py [--delay 2.0] [--runs 5]

What it does, all on 127.0.0.1, every process bounded and stopped at the end:
1. a fresh state folder (SQLite + filesystem broker) under var/bench-guard, migrated;
2. the ZVM simulator; sites A, B and C registered against it; a real Celery worker
   (prefork, two children) on that state;
3. ratio to the listing delay: with ``checkpoint_listing_delay`` = --delay on every site, a
   guard of db01 (one VPG) from the service call until the record says ok. The simulator
   lists a tagged checkpoint ``task_seconds`` (0.3 s by default) + delay after the insert,
   so that sum is the floor; the ratio is printed against the delay alone and against the
   floor;
4. 3 VPGs vs 1: app01 (three VPGs) against db01 (one), with the same delay and with none.

Times are wall clock from the call of ``checkpoint_request_create`` (which includes the
protection lookup) to the moment the record reads ok, sampled every 10 ms. Median of --runs.
Prints the figures; no asserts: it measures and reports.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the repository must be importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench._common import REPO, Proc, django_setup, fresh_dir, register_sites, sim_control, start_sim, start_worker

STATE = REPO / "var" / "bench-guard"
SIM_TASK_SECONDS = 0.3  # zvmsim's default time an insert task stays InProgress


class Bench:
    def __init__(self, url: str) -> None:
        self.url = url
        self.control = sim_control()
        self.n = 0
        self.parts: list[tuple[float, float, float, float]] = []

    def setup(self) -> None:
        register_sites(self.url, ("site-a", "site-b", "site-c"))

    def set_delay(self, seconds: float) -> None:
        self.control.delete(f"{self.url}/_sim/faults", timeout=30).raise_for_status()
        if seconds > 0:
            self.control.post(f"{self.url}/_sim/faults", json={"kind": "checkpoint_listing_delay", "site": None,
                                                               "seconds": seconds}, timeout=30).raise_for_status()

    def guard_seconds(self, vm: str) -> float:
        from rewind.checkpoints.services import checkpoint_request_create
        from rewind.models import ChangeGuard

        self.n += 1
        started = time.perf_counter()
        outcome = checkpoint_request_create(agent_name="bench", vm=vm, action="bench", change_id=f"bench-{self.n}")
        created_s = time.perf_counter() - started
        assert outcome.guard is not None, outcome.refusal
        pk = outcome.guard.pk
        while True:
            status = ChangeGuard.objects.values_list("status", flat=True).get(pk=pk)
            if status in ("ok", "failed"):
                break
            time.sleep(0.01)
        elapsed = time.perf_counter() - started
        guard = ChangeGuard.objects.get(pk=pk)
        if status != "ok":
            raise SystemExit(f"guard {pk} of {vm} failed: {guard.error}")
        self.parts.append(self._parts(guard, created_s))
        return elapsed

    @staticmethod
    def _parts(guard: object, created_s: float) -> tuple[float, float, float, float]:
        rows = list(guard.vpgs.all())  # type: ignore[attr-defined]
        queued = (guard.started_at - guard.requested_at).total_seconds()  # type: ignore[attr-defined]
        started = guard.started_at  # type: ignore[attr-defined]
        to_insert = max((r.insert_started_at - started).total_seconds() for r in rows)
        waited = max(r.waited_ms for r in rows) / 1000
        return created_s, queued, to_insert, waited

    def median(self, vm: str, runs: int) -> float:
        self.guard_seconds(vm)  # warm-up: logins, first connections
        self.parts.clear()
        value = statistics.median(self.guard_seconds(vm) for _ in range(runs))
        parts = [statistics.median(p[i] for p in self.parts) for i in range(4)]
        print(f"    {vm}: lookup+record {parts[0]:.3f} s, queue->task start {parts[1]:.3f} s, "
              f"task start->insert {parts[2]:.3f} s, insert->seen listed (slowest VPG) {parts[3]:.3f} s")
        return value


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--delay", type=float, default=2.0, help="simulated checkpoint listing delay, s (default 2)")
    parser.add_argument("--runs", type=int, default=5, help="guards per case; the median is reported (default 5)")
    args = parser.parse_args()
    django_setup(fresh_dir(STATE), REWIND_LOOKUP_CACHE_S="0")  # every guard pays its own protection lookup
    sim, url = start_sim(STATE)
    worker: Proc | None = None
    try:
        worker = start_worker(STATE, concurrency=2, name="bench-guard")
        bench = Bench(url)
        bench.setup()
        report(bench, args.delay, args.runs)
    finally:
        if worker is not None:
            worker.stop(timeout=30)
        sim.stop()


def report(bench: Bench, delay: float, runs: int) -> None:
    bench.set_delay(delay)
    one = bench.median("db01", runs)
    three = bench.median("app01", runs)
    floor = SIM_TASK_SECONDS + delay
    print(f"listing delay {delay:.1f} s (+ {SIM_TASK_SECONDS} s insert task = floor {floor:.2f} s), median of {runs}:")
    print(f"  guard db01 (1 VPG):   {one:.3f} s  ratio to delay {one / delay:.3f}, to floor {one / floor:.3f}"
          "  (target <= 1.05)")
    print(f"  guard app01 (3 VPGs): {three:.3f} s  ratio 3 VPGs / 1 VPG {three / one:.3f}  (target <= 1.1)")
    bench.set_delay(0)
    one0 = bench.median("db01", runs)
    three0 = bench.median("app01", runs)
    print(f"no listing delay (floor {SIM_TASK_SECONDS} s), median of {runs}:")
    print(f"  guard db01 (1 VPG):   {one0:.3f} s")
    print(f"  guard app01 (3 VPGs): {three0:.3f} s  ratio 3 VPGs / 1 VPG {three0 / one0:.3f}")


if __name__ == "__main__":
    main()
