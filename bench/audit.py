#!/usr/bin/env python
"""Benchmark: how many audit events per second the hash chain takes from concurrent writers.

--writers processes each append one event per transaction as fast as they can, on a PostgreSQL server of the
benchmark's own (fsync on) and on SQLite with the service's settings, each beside the same writers' bare one-row
commits in the same rounds (what the machine allows any commit); then ``verify_chain`` checks that every event
was chained, in order. No asserts.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the repository must be importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench._common import REPO, django_setup, fresh_dir, private_postgres
from bench.figures import Report, parse_args, spread_of

STATE = REPO / "var" / "bench-audit"
TARGET = 1000.0  # appends/s on PostgreSQL with 8 writers
BARE = "bench_bare_commit"  # the yardstick's table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--writers", type=int, default=8, help="processes appending at once (default 8)")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of one round (default 5)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per database; the median is reported")
    args = parse_args(parser, quick={"seconds": 2.0, "rounds": 2})
    figures = Report("audit", args)
    work = fresh_dir(STATE)
    # Each database in a process of its own: Django is set up once per process.
    with private_postgres(work / "pg") as url:
        postgres = measure_in_child("PostgreSQL", url, work, args, figures, target=TARGET)
    sqlite = measure_in_child("SQLite", "", work, args, figures, target=None)
    met = "met" if postgres >= TARGET else "NOT met"
    print(
        f"\nPostgreSQL, {args.writers} writers: {postgres:.0f} appends/s (target >= {TARGET:.0f}: {met})"
        f"  |  SQLite, {args.writers} writers: {sqlite:.0f} appends/s",
        flush=True,
    )
    figures.write()


def measure_in_child(
    name: str, url: str, work: Path, args: argparse.Namespace, figures: Report, *, target: float | None
) -> float:
    """Measure ``name`` in a process of its own; add its figures and return its median appends/s."""
    results = multiprocessing.get_context("spawn").Queue()
    child = multiprocessing.get_context("spawn").Process(
        target=measure, args=(name, url, str(work / name.lower()), args.writers, args.seconds, args.rounds, results)
    )
    child.start()
    rates, bare, checked, problem = results.get(timeout=600 + args.rounds * args.seconds * 4)
    child.join(60)
    median, bare_median = statistics.median(rates), statistics.median(bare)
    print(
        f"{name}: {args.writers} writers, one event per transaction: "
        f"{', '.join(f'{r:.0f}' for r in rates)} appends/s (median {median:.0f}; "
        f"bare commits of the same writers: {', '.join(f'{r:.0f}' for r in bare)}/s, median {bare_median:.0f}); "
        f"chain: {checked} events, {'every hash verified, none waiting' if problem is None else 'BROKEN: ' + problem}",
        flush=True,
    )
    figures.add(
        f"{name}: appends/s with {args.writers} concurrent writers",
        median,
        "/s",
        better="higher",
        target=target,
        reference=bare_median,
        reference_name="bare one-row commits/s, same writers",
        spread=spread_of(rates),
        note="each append is a commit (the disk) plus its share of chaining; the cores are shared",
    )
    figures.add(f"{name}: chain verified after the run", float(problem is None), better="higher", target=1)
    return median


def measure(
    name: str, url: str, var_dir: str, writers: int, seconds: float, rounds: int, results: multiprocessing.Queue
) -> None:
    """In a process of its own: set Django up on ``url`` (SQLite when empty), run the rounds, check the chain."""
    django_setup(Path(var_dir), **({"DATABASE_URL": url} if url else {}))
    from django.db import connection, connections

    from rewind.audit import verify_chain
    from rewind.models import AuditEvent

    key = "BIGSERIAL" if connection.vendor == "postgresql" else "INTEGER"
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE TABLE {BARE} (id {key} PRIMARY KEY, writer INTEGER, n INTEGER, data TEXT)")
    connections.close_all()  # each writer opens its own
    rates, bare, appended = [], [], 0
    for _ in range(rounds):
        counts = run_writers(append_for, writers, seconds)
        appended += sum(counts)
        rates.append(sum(counts) / seconds)
        bare.append(sum(run_writers(commit_bare_for, writers, seconds)) / seconds)
    checked, problem = verify_chain()
    waiting = AuditEvent.objects.filter(seq__isnull=True).count()
    found = None if problem is None else f"event {problem.seq}: {problem.reason}"
    if found is None and (waiting or checked != appended):
        found = f"{checked} events chained of {appended} appended, {waiting} waiting"
    results.put((rates, bare, checked, found))


def run_writers(target: Callable[..., None], writers: int, seconds: float) -> list[int]:
    """``writers`` forked processes running ``target`` together for ``seconds``; how many each did."""
    go_at = time.time() + 1.0
    done = multiprocessing.get_context("fork").Queue()
    procs = [
        multiprocessing.get_context("fork").Process(target=target, args=(go_at, seconds, n, done))
        for n in range(writers)
    ]
    for proc in procs:
        proc.start()
    counts = [done.get(timeout=seconds + 120) for _ in procs]
    for proc in procs:
        proc.join(30)
    return counts


def commit_bare_for(go_at: float, seconds: float, writer: int, done: multiprocessing.Queue) -> None:
    """The yardstick: commit one bare row per transaction from ``go_at`` for ``seconds``; put how many."""
    from django.db import connection, connections, transaction

    connections.close_all()
    time.sleep(max(0.0, go_at - time.time()))
    end, count = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(f"INSERT INTO {BARE} (writer, n, data) VALUES (%s, %s, %s)", [writer, count, "x" * 200])
        count += 1
    connections.close_all()
    done.put(count)


def append_for(go_at: float, seconds: float, writer: int, done: multiprocessing.Queue) -> None:
    """Append events one per transaction from ``go_at`` for ``seconds``; put how many."""
    from django.db import connections, transaction

    from rewind.audit import Actor, AuditEntry, audit_append
    from rewind.audit.actions import GuardAction

    connections.close_all()  # never the parent's connection, inherited by the fork
    actor = Actor.agent(f"bench-{writer}")
    time.sleep(max(0.0, go_at - time.time()))
    end, count = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        data = {
            "vm": f"vm-{count:05d}",
            "vm_identifier": f"{os.getpid()}-{count}",
            "change_id": f"bench-{writer}-{count}",
            "tag": f"ai:bench-{writer} | bench | vm=vm-{count:05d} | change=bench-{count} | 2026-12-03T00:00:00Z",
            "tool": "ssh/exec",
            "timeout_s": 300,
            "vpgs": ["vpg-a", "vpg-b"],
        }
        with transaction.atomic():
            audit_append([AuditEntry(actor, GuardAction.CREATED, ("guard", str(count)), data)])
        count += 1
    connections.close_all()
    done.put(count)


if __name__ == "__main__":
    main()
