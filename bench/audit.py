#!/usr/bin/env python
"""Benchmark: how many audit events per second the hash chain takes from concurrent writers.

    .venv/bin/python bench/audit.py [--writers 8] [--seconds 5] [--rounds 3] [--quick] [--json F]

Every change this service makes appends its audit event in the change's own transaction, under
the chain head's lock (``rewind.audit.audit_append``), so appends from every process are one
queue. This measures that queue: --writers processes, each appending one event per transaction
(the shape of a guard's ``guard.created``) as fast as it can for --seconds, --rounds times, on

1. PostgreSQL: a server of the benchmark's own (initdb in var/bench-audit, its default settings,
   fsync on), the production database; target at least 1,000 appends/s with 8 writers;
2. SQLite, the embedded default, with the service's settings (WAL, IMMEDIATE transactions).

After each database's rounds, ``verify_chain`` walks the whole chain: every event must be in it,
in order, its hash matching. Prints appends/s per round, the median and the chain check; no
asserts.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the repository must be importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench._common import REPO, django_setup, fresh_dir, private_postgres
from bench.figures import Report, parse_args, spread_of

STATE = REPO / "var" / "bench-audit"


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
        measure_in_child("PostgreSQL", url, work, args, figures, target=1000.0)
    measure_in_child("SQLite", "", work, args, figures, target=None)
    figures.write()


def measure_in_child(
    name: str, url: str, work: Path, args: argparse.Namespace, figures: Report, *, target: float | None
) -> None:
    results = multiprocessing.get_context("spawn").Queue()
    child = multiprocessing.get_context("spawn").Process(
        target=measure, args=(name, url, str(work / name.lower()), args.writers, args.seconds, args.rounds, results)
    )
    child.start()
    rates, checked, problem = results.get(timeout=600 + args.rounds * args.seconds * 2)
    child.join(60)
    print(
        f"{name}: {args.writers} writers, one event per transaction: "
        f"{', '.join(f'{r:.0f}' for r in rates)} appends/s (median {statistics.median(rates):.0f}); "
        f"chain: {checked} events, {'every hash verified' if problem is None else 'BROKEN: ' + problem}",
        flush=True,
    )
    figures.add(
        f"{name}: appends/s with {args.writers} concurrent writers",
        statistics.median(rates),
        "/s",
        better="higher",
        target=target,
        spread=spread_of(rates),
    )
    figures.add(f"{name}: chain verified after the run", float(problem is None), better="higher", target=1)


def measure(
    name: str, url: str, var_dir: str, writers: int, seconds: float, rounds: int, results: multiprocessing.Queue
) -> None:
    """In a process of its own: set Django up on ``url`` (SQLite when empty), run the rounds, check the chain."""
    django_setup(Path(var_dir), **({"DATABASE_URL": url} if url else {}))
    from django.db import connections

    from rewind.audit import verify_chain

    connections.close_all()  # each writer opens its own
    rates = []
    for _ in range(rounds):
        go_at = time.time() + 1.0
        done = multiprocessing.get_context("fork").Queue()
        procs = [
            multiprocessing.get_context("fork").Process(target=append_for, args=(go_at, seconds, n, done))
            for n in range(writers)
        ]
        for proc in procs:
            proc.start()
        counts = [done.get(timeout=seconds + 120) for _ in procs]
        for proc in procs:
            proc.join(30)
        rates.append(sum(counts) / seconds)
    checked, problem = verify_chain()
    results.put((rates, checked, None if problem is None else f"event {problem.seq}: {problem.reason}"))


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
