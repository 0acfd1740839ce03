#!/usr/bin/env python
"""Benchmark: what a guard costs the ZVM and how long it takes, beside what the ZVM needs.

After a warm-up that teaches site A's pacing: guards of db01 (one VPG) and app01 (three) one after the other,
1.1 s apart so none queues behind the last in the site's cap, each timed beside the simulator's own insert and
listing time and counted in ZVM requests; then a ZVM that becomes three times faster, and the guard from which
every wait is within 1.1 times its new time; then --concurrent guards at once against the site's cap. No
asserts.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: the repository must be importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench._common import (
    REPO,
    SITE_NAMES,
    Proc,
    django_setup,
    fresh_dir,
    register_sites,
    sim_control,
    start_sim,
    start_worker,
)
from bench.figures import Report, parse_args, spread_of

STATE = REPO / "var" / "bench-guard"
SIM_TASK_SECONDS = 0.3  # zvmsim's default time an insert task stays InProgress
SLUGS = ("site-a", "site-b", "site-c")
CAP_SITE = "site-a"
# The calls a guard's wait makes (the rest at the sites is the protection lookup and logins).
WAIT_CALLS = ("POST /v1/vpgs/{vpg_id}/checkpoints", "GET /v1/tasks/{task_id}", "GET /v1/vpgs/{vpg_id}/checkpoints")
# Between measured guards: the last guard's calls leave the site's 1 s cap window first, so a
# guard's time is its own and not the queue behind the one before (``--concurrent`` measures that).
PAUSE_S = 1.1
FASTER_GUARDS = 6  # guards after the ZVM becomes faster


@dataclass
class Sample:
    vm: str
    vpgs: int
    wall_s: float  # the call → the record reads ok
    wait_s: float  # the slowest VPG: insert started → seen listed
    calls: int  # ZVM requests, all sites
    calls_protected: int  # ZVM requests at the protected site (site A)
    parts: tuple[float, float, float]  # lookup + record, queued → task start, task start → last insert start
    by_call: dict[str, int]  # requests at the protected site by "METHOD /template"


class Bench:
    def __init__(self, url: str) -> None:
        self.url = url
        self.control = sim_control()
        self.n = 0

    def setup(self) -> None:
        register_sites(self.url, SLUGS)

    def get(self, path: str) -> Any:
        resp = self.control.get(f"{self.url}/_sim/{path}", timeout=30)
        resp.raise_for_status()
        return resp.json()

    def reset(self) -> None:
        self.control.post(f"{self.url}/_sim/reset", timeout=30).raise_for_status()

    def set_delay(self, seconds: float) -> None:
        self.control.delete(f"{self.url}/_sim/faults", timeout=30).raise_for_status()
        if seconds > 0:
            self.control.post(
                f"{self.url}/_sim/faults",
                json={"kind": "checkpoint_listing_delay", "site": None, "seconds": seconds},
                timeout=30,
            ).raise_for_status()

    def calls(self) -> dict[str, int]:
        return {slug: sum(self.get(f"sites/{slug}/calls").values()) for slug in SLUGS}

    def request(self, vm: str) -> tuple[int | None, str]:
        """Record a guard of ``vm`` (lookup included); its pk, or None and the refusal."""
        from rewind.checkpoints.services import guard_create

        self.n += 1
        outcome = guard_create(agent_name="bench", vm=vm, action="bench", change_id=f"bench-{self.n}")
        if outcome.guard is None:
            return None, str(outcome.refusal)
        return outcome.guard.pk, ""

    @staticmethod
    def wait_done(pk: int, poll: float = 0.01) -> str:
        from rewind.models import ChangeGuard

        while True:
            status = ChangeGuard.objects.values_list("status", flat=True).get(pk=pk)
            if status in ("ok", "failed"):
                return status
            time.sleep(poll)

    def guard(self, vm: str) -> Sample:
        from rewind.models import ChangeGuard

        before = self.calls()
        before_a = self.get(f"sites/{CAP_SITE}/calls")
        started = time.perf_counter()
        pk, refusal = self.request(vm)
        created = time.perf_counter() - started
        if pk is None:
            raise SystemExit(f"guard of {vm} refused: {refusal}")
        status = self.wait_done(pk)
        wall = time.perf_counter() - started
        guard = ChangeGuard.objects.get(pk=pk)
        if status != "ok":
            raise SystemExit(f"guard {pk} of {vm} failed: {guard.error}")
        after = self.calls()
        after_a = self.get(f"sites/{CAP_SITE}/calls")
        rows = list(guard.vpgs.all())
        wait = max(r.waited_ms or 0 for r in rows) / 1000
        assert guard.started_at is not None
        queued = (guard.started_at - guard.requested_at).total_seconds()
        to_insert = max((r.insert_started_at - guard.started_at).total_seconds() for r in rows if r.insert_started_at)
        by_call = {k: n - before_a.get(k, 0) for k, n in after_a.items() if n - before_a.get(k, 0)}
        return Sample(
            vm,
            len(rows),
            wall,
            wait,
            sum(after.values()) - sum(before.values()),
            after[CAP_SITE] - before[CAP_SITE],
            (created, queued, to_insert),
            by_call,
        )

    def filler_vms_at(self, slug: str, count: int) -> list[str]:
        """Filler VMs whose every VPG is protected at ``slug`` (so every insert goes to its ZVM)
        and can take a checkpoint (not in initial sync, no failover test)."""
        from rewind.models import Site
        from rewind.sites import site_client

        site = Site.objects.get(name=SITE_NAMES[slug])
        busy = {
            v.identifier
            for v in site_client(site).list_vpgs()
            if v.status == 0 or v.sub_status == 1 or v.failover_test_running
        }
        width = max(5, len(str(self.get("state")["vms"])))
        found: list[str] = []
        number = 1
        while len(found) < count:
            name = f"vm-{number:0{width}d}"
            number += 1
            resp = self.control.get(f"{self.url}/_sim/vms/{name}", timeout=30)
            if resp.status_code == 404:
                raise SystemExit(f"only {len(found)} filler VMs are protected at {slug}; raise --vms")
            vpgs = resp.json()["vpgs"]
            if vpgs and all(v["protected"] == slug and v["identifier"] not in busy for v in vpgs):
                found.append(name)
        return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--delay", type=float, default=3.0, help="simulated checkpoint listing delay, s (default 3)")
    parser.add_argument("--runs", type=int, default=5, help="measured guards per VM; medians are reported (default 5)")
    parser.add_argument("--warmup", type=int, default=10, help="guards of db01 before measuring (default 10)")
    parser.add_argument("--concurrent", type=int, default=50, help="guards at once on one site (default 50)")
    parser.add_argument("--vms", type=int, default=600, help="filler VMs in the simulator (default 600)")
    args = parse_args(parser, quick={"runs": 3, "warmup": 5, "concurrent": 20, "vms": 300})
    figures = Report("guard", args)
    django_setup(fresh_dir(STATE), REWIND_LOOKUP_CACHE_S="0")  # every guard pays its own protection lookup
    sim, url = start_sim(STATE, "--vms", str(args.vms))
    worker: Proc | None = None
    try:
        worker = start_worker(STATE, concurrency=max(4, args.concurrent), name="bench-guard", pool="threads")
        bench = Bench(url)
        bench.setup()
        report(bench, args, figures)
        figures.write()
    finally:
        if worker is not None:
            worker.stop(timeout=30)
        sim.stop()


def report(bench: Bench, args: argparse.Namespace, figures: Report) -> None:
    from django.conf import settings

    from rewind.checkpoints import poll_timing
    from rewind.checkpoints.selectors import site_listing_times_s
    from rewind.models import Site

    floor = SIM_TASK_SECONDS + args.delay
    bench.set_delay(args.delay)
    warm = [bench.guard("db01") for _ in range(args.warmup)]
    site_a = Site.objects.get(name="Site A")
    fc = poll_timing.forecast(site_listing_times_s(site_a.pk))
    learned = f"expected {fc.expected_s:.3f} s, window ±{fc.early_s:.3f} s" if fc else "nothing (too few guards)"
    print(
        f"warm-up: {args.warmup} guards of db01 (the first {poll_timing.MIN_SAMPLES} without history); "
        f"site A's time to list learned: {learned}"
    )
    for i, w in enumerate(warm[: poll_timing.MIN_SAMPLES + 1]):
        print(
            f"  warm-up guard {i + 1}: wait {w.wait_s:.3f} s = {w.wait_s / floor:.3f} x floor, "
            f"{w.calls_protected} requests at the protected site, {w.calls} in all"
        )
    print(
        f"checkpoint listing delay {args.delay:.1f} s + {SIM_TASK_SECONDS} s insert task = the simulator's "
        f"insert + listing time {floor:.2f} s; median of {args.runs} guards each:"
    )
    for vm in ("db01", "app01"):
        samples = []
        for _ in range(args.runs):
            time.sleep(PAUSE_S)
            samples.append(bench.guard(vm))
        vpgs = samples[0].vpgs
        own = statistics.median(sum(n for k, n in s.by_call.items() if k in WAIT_CALLS) for s in samples)
        wall = statistics.median(s.wall_s for s in samples)
        wait = statistics.median(s.wait_s for s in samples)
        calls = statistics.median(s.calls for s in samples)
        calls_a = statistics.median(s.calls_protected for s in samples)
        print(
            f"  {vm} ({vpgs} VPG{'s' if vpgs > 1 else ''}): wall {wall:.3f} s = {wall / floor:.3f} x floor "
            f"(target <= 1.10); wait alone {wait:.3f} s = {wait / floor:.3f} x floor"
        )
        print(
            f"      ZVM requests per guard {calls:.0f} (all sites, lookup included) = {calls / vpgs:.1f} per guarded "
            f"VPG (target <= 12); at the protected site {calls_a:.0f} = {calls_a / vpgs:.1f} per VPG, of which the "
            f"wait's own (insert, task, list) {own:.0f} = {own / vpgs:.1f} per VPG"
        )
        parts = [statistics.median(s.parts[i] for s in samples) for i in range(3)]
        print(
            f"      before the wait: lookup + record {parts[0]:.3f} s, queued -> task start {parts[1]:.3f} s, "
            f"task start -> last insert start {parts[2]:.3f} s"
        )
        walls = [s.wall_s for s in samples]
        figures.add(
            f"{vm} ({vpgs} VPG{'s' if vpgs > 1 else ''}): guard wall time",
            wall,
            "s",
            target=1.10 * floor,
            reference=floor,
            reference_name="the simulator's insert + listing",
            spread=spread_of(walls),
        )
        figures.add(f"{vm}: ZVM requests per guarded VPG", calls / vpgs, target=12)
        last = samples[-1].by_call
        print(
            "      requests at the protected site, last guard: "
            + ", ".join(f"{k} {n}" for k, n in sorted(last.items()))
        )
    faster(bench, args, figures)
    concurrent(bench, args, settings.ZVM_MAX_REQUESTS_PER_S, figures)


def faster(bench: Bench, args: argparse.Namespace, figures: Report) -> None:
    """The ZVM becomes faster (a third of the listing delay): how many guards until the wait follows it."""
    delay = args.delay / 3
    floor = SIM_TASK_SECONDS + delay
    bench.set_delay(delay)
    waits = []
    for _ in range(FASTER_GUARDS):
        time.sleep(PAUSE_S)
        waits.append(bench.guard("db01").wait_s)
    # Learned: from this guard on, every wait is within 1.1 x the faster ZVM's own time.
    learned = next((i + 1 for i in range(len(waits)) if all(w <= 1.1 * floor for w in waits[i:])), None)
    print(
        f"the ZVM becomes faster (listing delay {args.delay:.1f} -> {delay:.1f} s, insert + listing {floor:.2f} s): "
        f"waits of the next guards {', '.join(f'{w:.2f}' for w in waits)} s; "
        f"within 1.1 x from guard {learned if learned is not None else 'never'} on (target <= 3)"
    )
    figures.add(
        "guards until the pacing follows a faster ZVM",
        learned if learned is not None else FASTER_GUARDS + 1,  # not within the guards measured
        target=3,
        note=f"waits {', '.join(f'{w:.2f}' for w in waits)} s against {floor:.2f} s"
        + ("" if learned is not None else f": not within the {FASTER_GUARDS} guards measured"),
    )
    bench.set_delay(args.delay)


def concurrent(bench: Bench, args: argparse.Namespace, cap: float, figures: Report) -> None:
    from django.db import connection

    vms = bench.filler_vms_at(CAP_SITE, args.concurrent)
    bench.reset()  # zeroes the peak-rate meter (and the faults: the delay is set again)
    bench.set_delay(args.delay)
    bench.setup()  # the reset revoked every token: log in again before the burst
    time.sleep(1.1)  # ... outside the 1 s windows the burst is measured in
    before = bench.calls()
    results: list[tuple[str, str, int]] = []
    lock = threading.Lock()
    go = threading.Event()

    def one(vm: str) -> None:
        try:
            go.wait()
            pk, refusal = bench.request(vm)
            status = bench.wait_done(pk, poll=0.2) if pk is not None else f"refused: {refusal}"
            vpgs = 0
            if pk is not None:
                from rewind.models import TaggedCheckpoint

                vpgs = TaggedCheckpoint.objects.filter(guard_id=pk).count()
            with lock:
                results.append((vm, status, vpgs))
        finally:
            connection.close()

    threads = [threading.Thread(target=one, args=(vm,)) for vm in vms]
    for t in threads:
        t.start()
    started = time.perf_counter()
    go.set()
    for t in threads:
        t.join()
    wall = time.perf_counter() - started
    after = bench.calls()
    rate = bench.get(f"sites/{CAP_SITE}/rate")
    ok = sum(1 for _, status, _ in results if status == "ok")
    vpgs = sum(n for _, status, n in results if status == "ok")
    others = sorted({status for _, status, _ in results if status != "ok"})
    calls = sum(after.values()) - sum(before.values())
    print(
        f"{len(vms)} concurrent guards of distinct VMs protected at {CAP_SITE} ({vpgs} VPGs), "
        f"listing delay {args.delay:.1f} s:"
    )
    print(f"  ok {ok}/{len(vms)}{' (others: ' + '; '.join(others) + ')' if others else ''}; all done in {wall:.1f} s")
    print(
        f"  peak requests in any 1 s at {CAP_SITE}: {rate.get('peak_per_s')} vs cap {cap:g} "
        f"(ZVM_MAX_REQUESTS_PER_S); {rate.get('requests')} requests there in all"
    )
    if vpgs:
        print(f"  ZVM requests {calls} (all sites) = {calls / vpgs:.1f} per guarded VPG")
    figures.add(
        f"{len(vms)} guards at once: peak requests in any 1 s at {CAP_SITE}", rate.get("peak_per_s") or 0, target=cap
    )
    figures.add(f"{len(vms)} guards at once: guards not ok", len(vms) - ok, target=0)


if __name__ == "__main__":
    main()
