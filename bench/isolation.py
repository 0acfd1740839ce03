"""One stuck ZVM among three: what it costs everyone else (figures only, no asserts).

Against the simulator with three sites (short timeouts, the look-up cache off, circuits in the database): a
look-up of a VM at Site A with every site up, the first after Site C hangs (which waits for it once and opens
its circuit), and the same look-up after that; a guard with every site up and with Site C hung.
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
from bench.figures import Report, parse_args

STATE = REPO / "var" / "bench-isolation"
SLUGS = ("site-a", "site-b", "site-c")
HUNG = "site-c"


def lookups(runs: int) -> list[float]:
    from rewind.protection import find_protection

    out = []
    for _ in range(runs):
        started = time.perf_counter()
        found = find_protection("web01")
        out.append(time.perf_counter() - started)
        assert found.vpgs
    return out


def guard_s(n: int) -> float:
    from rewind.checkpoints.services import guard_create
    from rewind.models import ChangeGuard

    started = time.perf_counter()
    outcome = guard_create(agent_name="bench", vm="web01", action="bench", change_id=f"iso-{n}")
    if outcome.guard is None:
        raise SystemExit(f"guard refused: {outcome.refusal}")
    while (status := ChangeGuard.objects.values_list("status", flat=True).get(pk=outcome.guard.pk)) not in (
        "ok",
        "failed",
    ):
        time.sleep(0.01)
    if status != "ok":
        raise SystemExit(f"guard failed: {ChangeGuard.objects.get(pk=outcome.guard.pk).error}")
    return time.perf_counter() - started


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=50, help="look-ups per phase; medians (default 50)")
    parser.add_argument("--guards", type=int, default=5, help="guards per phase; medians (default 5)")
    parser.add_argument("--timeout", type=float, default=2.0, help="ZVM connect and read timeout, s (default 2)")
    args = parse_args(parser, quick={"runs": 20, "guards": 3})
    figures = Report("isolation", args)
    t = f"{args.timeout:g}"
    django_setup(
        fresh_dir(STATE),
        REWIND_LOOKUP_CACHE_S="0",
        ZVM_CONNECT_TIMEOUT_S=t,
        ZVM_READ_TIMEOUT_S=t,
        ZVM_CIRCUIT_PROBE_S="600",
        ZVM_MAX_REQUESTS_PER_S="1000",
    )
    sim, url = start_sim(STATE)
    worker: Proc | None = None
    control = sim_control()
    try:
        worker = start_worker(STATE, concurrency=4, name="bench-isolation", pool="threads")
        register_sites(url, SLUGS)
        lookups(20)  # warm-up: logins, pools
        guard_s(0)
        up = statistics.median(lookups(args.runs))
        guard_up = statistics.median(guard_s(n) for n in range(1, args.guards + 1))

        control.post(
            f"{url}/_sim/faults", json={"kind": "hang", "site": HUNG, "seconds": 3600, "path_regex": ".*"}, timeout=30
        ).raise_for_status()
        seen_before = sum(control.get(f"{url}/_sim/sites/{HUNG}/calls", timeout=30).json().values())
        first = lookups(1)[0]
        hung = statistics.median(lookups(args.runs))
        guard_hung = statistics.median(guard_s(n) for n in range(100, 100 + args.guards))
        seen_after = sum(control.get(f"{url}/_sim/sites/{HUNG}/calls", timeout=30).json().values())

        print(f"ZVM timeouts: connect {t} s, read {t} s; look-up cache off; circuits in the database")
        print(f"find_protection(web01), all sites up:           median {ms(up)} of {args.runs}")
        print(f"first look-up after Site C hangs:               {ms(first)} (the read timeout once: {t} s)")
        print(
            f"find_protection(web01), Site C hung, afterwards: median {ms(hung)} of {args.runs}"
            f"  -> ratio {hung / up:.2f} (target <= 1.2)"
        )
        print(f"guard of web01, all sites up:                   median {ms(guard_up)} of {args.guards}")
        print(
            f"guard of web01, Site C hung:                    median {ms(guard_hung)} of {args.guards}"
            f"  -> ratio {guard_hung / guard_up:.2f} (target <= 1.2)"
        )
        print(
            f"requests that reached hung Site C after the hang: {seen_after - seen_before} "
            f"(for {args.runs + 1} look-ups and {args.guards} guards)"
        )
        figures.add(
            "find_protection with Site C hung",
            hung * 1000,
            "ms",
            target=1.2 * up * 1000,
            reference=up * 1000,
            reference_name="all sites up",
        )
        figures.add(
            "guard with Site C hung",
            guard_hung * 1000,
            "ms",
            target=1.2 * guard_up * 1000,
            reference=guard_up * 1000,
            reference_name="all sites up",
        )
        figures.write()
    finally:
        control.delete(f"{url}/_sim/faults", timeout=30)
        if worker is not None:
            worker.stop(timeout=30)
        sim.stop()


if __name__ == "__main__":
    main()
