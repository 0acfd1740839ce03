#!/usr/bin/env python
"""Benchmark: many guards at once beside one guard, and what their waiting holds in the worker.

The shape of ``make run`` on a state folder of its own (one prefork worker, the beat, the simulator with sites
A, B and C): after a warm-up that teaches each site's pacing, a single-guard reference, then bursts of guards
(--sizes) at the default cap and at --raised-cap, to tell the cap from the design. Guards are created as the MCP
server creates them, on --creators threads. Each burst is held against its cap-bound floor, and the worker is
watched while guards only wait (``bench/_worker_watch.py``); the figures and their definitions are on the
benchmarks page. No asserts.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import statistics
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: the repository must be importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench._common import (
    PRODUCTION_HELP,
    PRODUCTION_SHAPE,
    PYTHON,
    REPO,
    SITE_NAMES,
    Proc,
    django_setup,
    fresh_dir,
    production_servers,
    register_sites,
    sim_control,
    start_sim,
    start_worker,
)
from bench._worker_watch import (
    SAMPLE_EVERY_S,
    PoolSampler,
    WorkerLog,
    children_of,
    cpu_and_threads,
    executing,
    read_worker_log,
)
from bench.figures import Report, parse_args
from rewind.lib.processes import ProcessError
from rewind.mcp.context import POOL_SIZE

STATE = REPO / "var" / "bench-guard-concurrency"
SLUGS = ("site-a", "site-b", "site-c")
SIM_TASK_SECONDS = 0.3  # zvmsim's default time an insert task stays InProgress
POLL_TASK = "rewind.checkpoints.poll_site"
BEAT_TASKS = {
    "recoveries.reap",
    "rewind.checkpoints.resume_stale",
    "rewind.checkpoints.listed_late",
    "rewind.sites.probe",
}
LOOKUP_CALL = "GET /v1/vms"
INSERT_CALL = "POST /v1/vpgs/{vpg_id}/checkpoints"
READ_EVERY_S = 0.02
PAUSE_S = 1.1  # the last guard's requests leave the site's 1 s cap window before the next starts
RUN_LIMIT_S = 400.0  # past the guards' own 300 s timeout: what is still unfinished then is reported


class Sim:
    def __init__(self, url: str) -> None:
        self.url = url
        self.http = sim_control()

    def get(self, path: str) -> Any:
        resp = self.http.get(f"{self.url}/_sim/{path}", timeout=30)
        resp.raise_for_status()
        return resp.json()

    def calls(self) -> dict[str, Counter[str]]:
        return {slug: Counter(self.get(f"sites/{slug}/calls")) for slug in SLUGS}

    def peaks(self) -> str:
        return ", ".join(f"{SITE_NAMES[s]} {self.get(f'sites/{s}/rate')['peak_per_s']}" for s in SLUGS)

    def prepare(self, delay: float, *, reset: bool) -> None:
        """(A fresh world: counters and peak-rate meters at 0;) the listing delay set; the sites logged in."""
        if reset:
            self.http.post(f"{self.url}/_sim/reset", timeout=30).raise_for_status()
        self.http.post(
            f"{self.url}/_sim/faults",
            json={"kind": "checkpoint_listing_delay", "site": None, "seconds": delay},
            timeout=30,
        ).raise_for_status()
        register_sites(self.url, SLUGS)

    def eligible_vms(self, count: int) -> list[tuple[str, str]]:
        """The first ``count`` filler VMs (name, protected site) whose every VPG can take a checkpoint."""
        from rewind.models import Site
        from rewind.sites import site_client

        busy = {
            v.identifier
            for site in Site.objects.all()
            for v in site_client(site).list_vpgs()
            if v.status == 0 or v.sub_status == 1 or v.failover_test_running
        }
        width = max(5, len(str(self.get("state")["vms"])))
        found: list[tuple[str, str]] = []
        number = 1
        while len(found) < count:
            name = f"vm-{number:0{width}d}"
            number += 1
            resp = self.http.get(f"{self.url}/_sim/vms/{name}", timeout=30)
            if resp.status_code == 404:
                raise SystemExit(f"only {len(found)} filler VMs can take a checkpoint; raise --vms")
            vpgs = resp.json()["vpgs"]
            if vpgs and not any(v["identifier"] in busy for v in vpgs):
                found.append((name, vpgs[0]["protected"]))
        return found


# --- guards ----------------------------------------------------------------------------------
@dataclass
class Run:
    started: float  # epoch s at the release
    wall_s: float  # release → the last guard read finished
    done_s: dict[int, float]  # guard pk → release → read finished
    refused: list[str]  # guards not created: the refusal or the error
    unfinished: int  # guards still unfinished at RUN_LIMIT_S
    create_cpu_s: float  # CPU the creating threads spent in guard_create (look-up, records, kicks)


def _creators(creators: int) -> str:
    return f"{creators} threads, each keeping its connection" if creators else "a thread and a connection per guard"


def run_guards(vms: list[str], prefix: str, creators: int = POOL_SIZE) -> Run:
    """Create a guard of each VM at once, on ``creators`` threads (0: a thread per guard); read
    them until all are finished."""
    from django.db import connection

    from rewind.checkpoints.services import guard_create

    pks: list[int] = []
    refused: list[str] = []
    cpu = [0.0]
    lock, go = threading.Lock(), threading.Event()
    queued = list(reversed(vms))

    def create(vm: str) -> None:
        try:
            began = time.thread_time()
            outcome = guard_create(agent_name="bench", vm=vm, action="bench", change_id=f"{prefix}-{vm}")
            spent = time.thread_time() - began
            with lock:
                cpu[0] += spent
                if outcome.guard is None:
                    refused.append(f"{vm}: {outcome.refusal}")
                else:
                    pks.append(outcome.guard.pk)
        except Exception as exc:  # a failure to report, not to hide
            with lock:
                refused.append(f"{vm}: {type(exc).__name__}: {exc}")

    def creator() -> None:
        # As a thread of the MCP server's pool: one connection, kept from guard to guard.
        go.wait()
        try:
            while True:
                with lock:
                    if not queued:
                        return
                    vm = queued.pop()
                create(vm)
        finally:
            connection.close()

    count = creators or len(vms)
    threads = [threading.Thread(target=creator, daemon=True) for _ in range(min(count, len(vms)))]
    for t in threads:
        t.start()
    started, t0 = time.time(), time.perf_counter()
    go.set()
    done = _read_until_finished(threads, pks, lock, t0)
    with lock:
        unfinished = len(set(pks) - set(done))
    return Run(started, max(done.values(), default=time.perf_counter() - t0), done, refused, unfinished, cpu[0])


def _read_until_finished(
    threads: list[threading.Thread], pks: list[int], lock: threading.Lock, t0: float
) -> dict[int, float]:
    from rewind.models import ChangeGuard

    done: dict[int, float] = {}
    while time.perf_counter() - t0 < RUN_LIMIT_S:
        creating = any(t.is_alive() for t in threads)  # before reading pks: a thread appends, then ends
        with lock:
            waiting = [pk for pk in pks if pk not in done]
        if waiting:
            finished = ChangeGuard.objects.filter(pk__in=waiting, status__in=("ok", "failed"))
            now = time.perf_counter() - t0
            done.update((pk, now) for pk in finished.values_list("pk", flat=True))
        elif not creating:
            break
        time.sleep(READ_EVERY_S)
    return done


@dataclass
class GuardFacts:
    ok: int
    failed: list[str]  # "vm: status: error" of the guards not ok
    vpgs_ok: int  # tagged checkpoints of the guards that ended ok
    distinct_vpgs: int
    vpgs_by_site: dict[str, int]  # site name -> distinct VPGs guarded there (ok or not): each listed at least once
    seen_listed_s: list[float]  # per listed VPG: insert start → seen listed
    waiting: list[tuple[float, float]]  # per guard: last insert start → finished (epoch s)


def guard_facts(pks: list[int]) -> GuardFacts:
    from rewind.models import ChangeGuard, TaggedCheckpoint

    guards = list(ChangeGuard.objects.filter(pk__in=pks).prefetch_related("vpgs"))
    ok = [g for g in guards if g.status == "ok"]
    rows = TaggedCheckpoint.objects.filter(guard__in=ok)
    waiting = []
    for g in guards:
        starts = [r.insert_started_at for r in g.vpgs.all() if r.insert_started_at]
        if starts and g.finished_at:
            waiting.append((max(starts).timestamp(), g.finished_at.timestamp()))
    return GuardFacts(
        ok=len(ok),
        failed=[f"{g.vm_name}: {g.status}: {g.error or '(no error)'}" for g in guards if g.status != "ok"],
        vpgs_ok=rows.count(),
        distinct_vpgs=rows.values("vpg_identifier").distinct().count(),
        vpgs_by_site=_vpgs_by_site(pks),
        seen_listed_s=[ms / 1000 for ms in rows.filter(status="listed").values_list("waited_ms", flat=True) if ms],
        waiting=waiting,
    )


def _vpgs_by_site(pks: list[int]) -> dict[str, int]:
    from rewind.models import TaggedCheckpoint

    pairs = TaggedCheckpoint.objects.filter(guard__in=pks, site__isnull=False).values_list(
        "site__name", "vpg_identifier"
    )
    return dict(Counter(name for name, _ in set(pairs)))


def learned() -> str:
    """Each site's time to list as its pacing has learned it (median ± the window it asks often in)."""
    from rewind.checkpoints import poll_timing
    from rewind.checkpoints.selectors import site_listing_times_s
    from rewind.models import Site

    out = []
    for slug in SLUGS:
        site = Site.objects.get(name=SITE_NAMES[slug])
        fc = poll_timing.forecast(site_listing_times_s(site.pk, limit=poll_timing.HISTORY))
        out.append(f"{SITE_NAMES[slug]} {fc.expected_s:.2f} s ±{fc.early_s:.2f}" if fc else f"{SITE_NAMES[slug]} -")
    return ", ".join(out)


# --- the stack -------------------------------------------------------------------------------
class Stack:
    """The worker (restartable with another cap) and its pool sampler."""

    def __init__(self, work: Path, servers: ServersCpu | None) -> None:
        self.work = work
        self.servers = servers  # the run's own PostgreSQL and Redis, in the production shape
        self.worker: Proc | None = None
        self.sampler: PoolSampler | None = None
        self.kept_logs: list[Path] = []

    def start_worker(self) -> None:
        self.worker = start_worker(self.work, concurrency=4, name="bench-guard-concurrency")
        self.sampler = PoolSampler(self.worker.pid)
        self.sampler.learn_idle()

    def stop_worker(self) -> None:
        """Stop the worker; its log is kept under a name of its own (the next worker starts a new one)."""
        if self.worker is not None:
            self.worker.stop(timeout=30)
            self.worker = None
            kept = self.work / f"worker-{len(self.kept_logs) + 1}.log"
            (self.work / "worker.log").rename(kept)
            self.kept_logs.append(kept)


def start_beat(work: Path) -> Proc:
    cmd = [PYTHON, "-m", "celery", "-A", "rewind", "beat", "--loglevel", "INFO"]
    proc = Proc("beat", [*cmd, "--schedule", str(work / "celerybeat-schedule")], log=work / "beat.log", cwd=REPO)
    try:
        proc.wait_for_output("is starting.")
    except ProcessError:
        proc.stop(timeout=15)
        raise
    return proc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--delay", type=float, default=5.0, help="simulated checkpoint listing delay, s (default 5)")
    parser.add_argument("--warmup", type=int, default=6, help="warm-up rounds of one guard per site (default 6)")
    parser.add_argument("--runs", type=int, default=5, help="single guards for the reference; median (default 5)")
    parser.add_argument("--raised-cap", type=float, default=100.0, help="the cap of the second runs (default 100)")
    parser.add_argument("--vms", type=int, default=400, help="filler VMs in the simulator (default 400)")
    parser.add_argument(
        "--creators",
        type=int,
        default=POOL_SIZE,
        help=f"threads creating the guards, as the MCP server's pool (default {POOL_SIZE}; 0: one per guard)",
    )
    parser.add_argument(
        "--sizes", default="16,200", help="the concurrent runs, comma-separated, at both caps (default 16,200)"
    )
    # The quick size warms up as long as the full one: with fewer rounds the first burst's looks came just too
    # soon (see the benchmarks page).
    parser.add_argument("--production", action="store_true", help=PRODUCTION_HELP)
    args = parse_args(parser, quick={"runs": 3, "sizes": "16,100", "vms": 300})
    figures = Report("guard_concurrency", args, shape=PRODUCTION_SHAPE if args.production else "")
    with contextlib.ExitStack() as servers:
        work = fresh_dir(STATE)
        django_setup(work, **(production_servers(servers, work) if args.production else {}))
        measure(args, figures, ServersCpu() if args.production else None)


def measure(args: argparse.Namespace, figures: Report, servers: ServersCpu | None) -> None:
    sim_proc, url = start_sim(STATE, "--vms", str(args.vms))
    stack = Stack(STATE, servers)
    beat: Proc | None = None
    try:
        sim = Sim(url)
        sim.prepare(args.delay, reset=False)
        stack.start_worker()
        beat = start_beat(STATE)
        report(sim, stack, args, figures)
        figures.write()
    finally:
        stack.stop_worker()
        if beat is not None:
            beat.stop()
        sim_proc.stop()


def report(sim: Sim, stack: Stack, args: argparse.Namespace, figures: Report) -> None:
    from django.conf import settings

    sizes = [int(n) for n in args.sizes.split(",") if n.strip()]
    vms = sim.eligible_vms(9 * args.warmup + args.runs + sum(sizes))  # the first ones of each site warm up
    warm = [[v for v, s in vms if s == slug][: args.warmup] for slug in SLUGS]
    rest = [v for v, _ in vms if not any(v in w for w in warm)]
    ref_vms, rest = rest[: args.runs], rest[args.runs :]
    groups = []
    for n in sizes:
        groups.append(rest[:n])
        rest = rest[n:]
    placed = dict(vms)
    reference = warm_up_and_reference(warm, ref_vms, args)
    print(
        "concurrent guards: filler VMs in inventory order, spread over the sites as the filler inventory "
        f"spreads them; the same {' and '.join(map(str, sizes))} VMs at both caps"
    )
    cap = float(settings.ZVM_MAX_REQUESTS_PER_S)
    print(f"\n=== default cap: ZVM_MAX_REQUESTS_PER_S {cap:g} requests/s per site ===")
    for group in groups:
        concurrent(sim, stack, group, placed, reference, cap, args, figures)
    print(f"\npeak requests in any 1 s at the default cap (this phase, warm-up included): {sim.peaks()} (cap {cap:g})")
    stack.stop_worker()
    sim.prepare(args.delay, reset=True)  # zeroes the peak-rate meters; no worker holds a revoked token
    _set_cap(args.raised_cap)
    stack.start_worker()
    print(f"\n=== RAISED cap: ZVM_MAX_REQUESTS_PER_S {args.raised_cap:g} requests/s per site (worker and look-ups) ===")
    for group in groups:
        concurrent(sim, stack, group, placed, reference, args.raised_cap, args, figures)
    print(f"\npeak requests in any 1 s at the raised cap: {sim.peaks()} (cap {args.raised_cap:g})")


def _set_cap(per_s: float) -> None:
    """The cap for the worker started next (its environment) and for this process's look-ups."""
    from django.conf import settings

    from rewind.protection import protection_cache_clear

    os.environ["ZVM_MAX_REQUESTS_PER_S"] = f"{per_s:g}"
    settings.ZVM_MAX_REQUESTS_PER_S = per_s
    protection_cache_clear()  # its clients were made with the old cap


def warm_up_and_reference(warm: list[list[str]], ref_vms: list[str], args: argparse.Namespace) -> float:
    not_ok: list[str] = []
    for i in range(args.warmup):
        run = run_guards([w[i] for w in warm if i < len(w)], f"warm{i}")
        not_ok += run.refused + guard_facts(list(run.done_s)).failed
        time.sleep(PAUSE_S)
    print(
        f"warm-up: {args.warmup} rounds of one guard per site, {len(not_ok)} not ok; learned time to list: {learned()}"
    )
    walls = []
    for vm in ref_vms:
        run = run_guards([vm], "ref")
        facts = guard_facts(list(run.done_s))
        if facts.ok == 1:
            walls.append(run.wall_s)
        not_ok += run.refused + facts.failed
        time.sleep(PAUSE_S)
    for failure in not_ok:
        print(f"  NOT OK: {failure}")
    if not walls:
        raise SystemExit("no single guard ended ok")
    reference = statistics.median(walls)
    print(
        f"one guard (the reference): median {reference:.2f} s of {len(walls)} "
        f"({', '.join(f'{w:.2f}' for w in walls)}); the simulator lists {SIM_TASK_SECONDS + args.delay:.1f} s "
        "after the insert"
    )
    return reference


def concurrent(
    sim: Sim,
    stack: Stack,
    vms: list[str],
    placed: dict[str, str],
    reference: float,
    cap: float,
    args: argparse.Namespace,
    figures: Report,
) -> None:
    if stack.sampler is None or stack.worker is None:
        raise RuntimeError("the worker is not running")
    time.sleep(PAUSE_S)
    before, knew, load = sim.calls(), learned(), os.getloadavg()[0]
    cpu_before = (stack.worker.cpu_seconds(), _own_cpu_s())
    servers_before = stack.servers.spent() if stack.servers else None
    stack.sampler.start()
    try:
        run = run_guards(vms, f"c{len(vms)}-cap{cap:g}", args.creators)
    finally:
        time.sleep(1.0)  # the last poll round's log line, and samples past the end
        stack.sampler.stop()
    cpu = (stack.worker.cpu_seconds() - cpu_before[0], _own_cpu_s() - cpu_before[1])
    servers_spent = None if stack.servers is None or servers_before is None else stack.servers.spent() - servers_before
    calls = {slug: count - before[slug] for slug, count in sim.calls().items()}
    facts = guard_facts(list(run.done_s))
    by_site = Counter(placed[v] for v in vms)
    print(
        f"\n{len(vms)} concurrent guards of distinct VMs ({', '.join(f'{SITE_NAMES[s]} {by_site[s]}' for s in SLUGS)}; "
        f"{facts.vpgs_ok} guarded VPGs, {facts.distinct_vpgs} distinct), cap {cap:g} requests/s per site:"
    )
    times = sorted(run.done_s.values()) or [0.0]
    print(
        f"  ok {facts.ok}/{len(vms)}; wall {run.wall_s:.2f} s = {run.wall_s / reference:.2f} x one guard "
        f"(one guard {reference:.2f} s); per guard p50 "
        f"{statistics.median(times):.2f} s, max {times[-1]:.2f} s"
    )
    failed = run.refused + facts.failed
    failed += [f"{run.unfinished} guards: unfinished after {RUN_LIMIT_S:.0f} s"] if run.unfinished else []
    for failure in sorted(set(failed))[:10]:
        print(f"  NOT OK: {failure}")
    bound = _print_requests(calls, facts, cap, reference, args)
    floor = max(bound, reference)
    print(
        f"  the floor: the larger of that bound and one guard alone, {floor:.2f} s; wall = {run.wall_s / floor:.2f} x "
        f"the floor (target <= {1.1 if len(vms) <= 16 else 1.2})"
    )
    seen = f"median {statistics.median(facts.seen_listed_s):.2f} s" if facts.seen_listed_s else "-"
    print(
        f"  time to list learned before the run: {knew}; insert -> seen listed, per VPG: {seen} "
        f"(the simulator lists at {SIM_TASK_SECONDS + args.delay:.1f} s)"
    )
    _print_worker(run, facts, read_worker_log(stack.work / "worker.log"), stack.sampler)
    ours = cpu[0] + run.create_cpu_s
    print(
        f"  CPU during the run: worker {cpu[0]:.1f} s, this process {cpu[1]:.1f} s (of which creating the guards "
        f"{run.create_cpu_s:.1f} s on {_creators(args.creators)}; the rest is this benchmark's reads), in {run.wall_s:.1f} s on {os.cpu_count()} "
        f"shared cores; load average {load:.1f} before"
    )
    counted = "worker + creating them"
    if servers_spent is not None:
        ours += servers_spent.postgres_s + servers_spent.redis_s
        counted += " + PostgreSQL + Redis"
        print(f"  the run's own servers: {servers_spent.line(len(vms))}")
    print(f"  our CPU per guard ({counted}): {ours * 1000 / len(vms):.1f} ms")
    name = f"{len(vms)} guards at cap {cap:g}"
    figures.add(
        f"{name}: wall over the floor",
        run.wall_s / floor,
        "x",
        target=1.1 if len(vms) <= 16 else 1.2,
        note=f"floor {floor:.2f} s: the larger of the cap-bound lower bound and one guard alone",
    )
    figures.add(
        f"{name}: our CPU per guard (worker + creation)",
        ours * 1000 / len(vms),
        "ms",
        target=15.0 if len(vms) >= 200 and cap >= 100 else None,
        note=f"created on {_creators(args.creators)}",
    )
    figures.add(f"{name}: guards not ok", len(vms) - facts.ok, target=0)


@dataclass(frozen=True)
class ServersSpent:
    """CPU seconds of the run's own PostgreSQL and Redis, and the database sessions opened; ``postgres_s`` leaves
    out ``reads_s``, the backend serving this process's own reads, which are the benchmark's, not the guards'."""

    postgres_s: float
    redis_s: float
    sessions: int
    reads_s: float
    reader_pid: int

    def __sub__(self, before: ServersSpent) -> ServersSpent:
        # A new backend for this process (a reconnection): the old one's share is left in ours.
        same = self.reader_pid == before.reader_pid
        reads = self.reads_s - before.reads_s if same else self.reads_s
        total = self.postgres_s + self.reads_s - before.postgres_s - before.reads_s
        return ServersSpent(
            total - reads, self.redis_s - before.redis_s, self.sessions - before.sessions, reads, self.reader_pid
        )

    def line(self, guards: int) -> str:
        return (
            f"PostgreSQL {self.postgres_s:.1f} s of CPU (and {self.reads_s:.1f} s serving this benchmark's own "
            f"reads, not counted), {self.sessions} sessions opened ({self.sessions / guards:.1f} a guard); "
            f"Redis {self.redis_s:.1f} s"
        )


class ServersCpu:
    """What the run's own PostgreSQL and Redis have spent so far: the postmaster with every backend, live or ended
    (reaped, so in its children's count), and Redis's own ``INFO cpu``."""

    def __init__(self) -> None:
        from redis import Redis

        status = Path(f"/proc/{self._own_backend()}/status").read_text()
        self.postmaster = int(next(ln for ln in status.splitlines() if ln.startswith("PPid:")).split()[1])
        self.redis = Redis.from_url(os.environ["REDIS_URL"])  # django_setup put it there

    def spent(self) -> ServersSpent:
        from django.db import connection

        # A backend reports its pending statistics (its session's start among them) at most once a
        # second, and when it ends: the count read here then holds every session of the run.
        time.sleep(1.1)
        with connection.cursor() as cursor:
            cursor.execute("SELECT sessions FROM pg_stat_database WHERE datname = current_database()")
            sessions = int(cursor.fetchone()[0])
        info = self.redis.info("cpu")
        redis_s = sum(
            float(info[k]) for k in ("used_cpu_sys", "used_cpu_user", "used_cpu_sys_children", "used_cpu_user_children")
        )
        backend = self._own_backend()
        reads_s = cpu_and_threads(backend)[0] / os.sysconf("SC_CLK_TCK")
        return ServersSpent(self._postgres_s() - reads_s, redis_s, sessions, reads_s, backend)

    @staticmethod
    def _own_backend() -> int:
        """The backend of this process's own connection: the one the benchmark reads on."""
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            return int(cursor.fetchone()[0])

    def _postgres_s(self) -> float:
        """The postmaster's CPU, its ended backends' (it reaped them: fields 16, 17 of its stat) and its live ones'."""
        fields = Path(f"/proc/{self.postmaster}/stat").read_text().rsplit(")", 1)[1].split()
        reaped = int(fields[13]) + int(fields[14])
        live = sum(cpu_and_threads(pid)[0] for pid in [self.postmaster, *children_of(self.postmaster)])
        return (reaped + live) / os.sysconf("SC_CLK_TCK")


def _own_cpu_s() -> float:
    t = os.times()
    return t.user + t.system


def _print_requests(
    calls: dict[str, Counter[str]], facts: GuardFacts, cap: float, reference: float, args: argparse.Namespace
) -> float:
    """Print the run's requests and its cap-bound lower bound; return the bound, s."""
    from rewind.zvm.pacing import window_shape

    every = sum(calls.values(), Counter())
    total = sum(every.values())
    per_vpg = f"{total / facts.vpgs_ok:.1f}" if facts.vpgs_ok else "-"
    print(
        f"  ZVM requests {total} = {per_vpg} per guarded VPG (target <= 12; all sites, look-ups included): "
        + ", ".join(f"{k} {n}" for k, n in every.most_common())
    )
    n, window = window_shape(cap)
    to_list = SIM_TASK_SECONDS + args.delay

    def after(requests: int) -> float:
        """The least time from a site's first request to its ``requests``-th under the cap."""
        return math.floor((requests - 1) / n) * window if requests else 0.0

    def bound_of(slug: str) -> float:
        k = calls[slug][LOOKUP_CALL] + calls[slug][INSERT_CALL]
        v = facts.vpgs_by_site.get(SITE_NAMES[slug], 0)
        return max(after(k) + to_list, after(k + v))

    busiest = max(SLUGS, key=bound_of)
    k = calls[busiest][LOOKUP_CALL] + calls[busiest][INSERT_CALL]
    v = facts.vpgs_by_site.get(SITE_NAMES[busiest], 0)
    bound = bound_of(busiest)
    print(
        f"  cap-bound lower bound: {SITE_NAMES[busiest]} got {k} look-ups + inserts and has {v} VPGs to list once "
        f"each; at {n} per {window:.2f} s its last insert goes >= {after(k):.2f} s after its first request "
        f"(+ {to_list:.1f} s to list = {after(k) + to_list:.2f} s) and its last listing >= {after(k + v):.2f} s: "
        f"{bound:.2f} s = {bound / reference:.2f} x one guard"
    )
    return bound


def _print_worker(run: Run, facts: GuardFacts, log: WorkerLog, sampler: PoolSampler) -> None:
    end = run.started + run.wall_s
    spans = [s for s in log.spans if s[2] >= run.started and s[1] <= end + 1.0]
    # Inserts are made by the sites' poll rounds (one batch per round): the waiting stretch starts
    # once the last insert is made.
    inserted = max((s for s, _ in facts.waiting), default=run.started)
    waiting_then = sum(1 for start, finished in facts.waiting if start <= inserted < finished)
    rounds = executing(spans, {POLL_TASK}, inserted, end)
    beat = executing(spans, BEAT_TASKS, inserted, end)
    other_names = {n for n, _, _ in spans} - BEAT_TASKS - {POLL_TASK}
    others = executing(spans, other_names, inserted, end)
    busy_max, busy_mean, cpu_s, threads = sampler.over(inserted, end)
    print(
        f"  worker while guards only waited (last insert step done -> last guard read: {end - inserted:.2f} s, "
        f"{waiting_then} guards waiting at its start):"
    )
    print(
        f"    tasks executing (worker log): poll rounds max {rounds[0]}, mean {rounds[1]:.2f}; "
        f"any other task max {others[0]} (target: none beyond the pollers); the beat's periodic tasks max {beat[0]}"
    )
    print(
        f"    pool processes (/proc every {SAMPLE_EVERY_S:g} s): busy max {busy_max} of {len(sampler.children)}, "
        f"mean {busy_mean:.2f}; CPU {cpu_s:.2f} s; threads max {threads} (one per idle process; "
        f"max {sampler.over(run.started, end)[3]} over the whole run)"
    )
    held = sum(min(e, end) - max(s, run.started) for m, s, e in spans if m == POLL_TASK)
    waited = sum(max(0.0, f - s) for s, f in facts.waiting)
    peak_waiting = executing([("w", s, f) for s, f in facts.waiting], {"w"}, run.started, end)[0]
    print(
        f"  whole run: pool processes held by poll rounds (their insert batches included) "
        f"{held:.1f} s, for {waited:.0f} guard-seconds of waiting (at most {peak_waiting} guards at once)"
    )
    problems = [p for at, p in log.problems if run.started <= at <= end + 1.0]
    for p in sorted(set(problems))[:5]:
        print(f"  worker log: {p} (x{problems.count(p)})")


if __name__ == "__main__":
    main()
