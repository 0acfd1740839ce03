#!/usr/bin/env python
"""Benchmark: the CPU of one poll round of a site, beside the CPU of the ZVM requests it makes.

``poller_round`` of one site run again and again in this process over N guards' rows, with nothing due (as most
rounds of a burst: it asks the ZVM nothing) and with every row due, beside one bare ``list_checkpoints`` through
the same client. Each round's own report must say it did what was set up, or the benchmark stops.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the repository must be importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench._common import REPO, django_setup, fresh_dir, register_sites, sim_control, start_sim
from bench.figures import Report, parse_args, spread_of

STATE = REPO / "var" / "bench-poll-round"
LISTING_DELAY_S = 600  # never listed while the benchmark runs: the rows stay waiting


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--guards", type=int, default=6, help="guards of web01 waiting at its VPGs' site")
    parser.add_argument(
        "--rounds", type=int, default=200, help="rounds with nothing due per repeat (a fifth as many due)"
    )
    parser.add_argument("--repeats", type=int, default=5, help="repeats; the figures are their medians")
    args = parse_args(parser, quick={"rounds": 60, "repeats": 3})
    figures = Report("poll_round", args)
    django_setup(fresh_dir(STATE))
    sim, url = start_sim(STATE)
    try:
        sim_control().post(
            f"{url}/_sim/faults", json={"kind": "checkpoint_listing_delay", "seconds": LISTING_DELAY_S}, timeout=30
        ).raise_for_status()
        run(url, args, figures)
        figures.write()
    finally:
        sim.stop()


def run(url: str, args: argparse.Namespace, figures: Report) -> None:
    from django.contrib.auth.models import User
    from django.utils import timezone

    from rewind.agents.models import Agent
    from rewind.checkpoints import poller
    from rewind.checkpoints.services import guard_create
    from rewind.models import Site, SitePoller, TaggedCheckpoint
    from rewind.sites import site_client

    register_sites(url, ("site-a", "site-b"))
    owner = User.objects.create_user("bench-owner", password="x-bench-pw-123")
    agent = Agent.objects.create(name="bench-agent", owner=owner)
    for n in range(args.guards):
        guard_create(agent_name=agent.name, vm="web01", action="edit", change_id=f"bench-{n}", timeout_s=3600)
    site_id = TaggedCheckpoint.objects.values_list("site_id", flat=True).first()
    if site_id is None:
        raise SystemExit("the guards of web01 asked for no checkpoint at a site configured here")
    site = Site.objects.get(pk=site_id)
    rows = TaggedCheckpoint.objects.filter(site=site)
    expected = rows.count()
    # The guards queued a round on the broker, which no worker runs here: this process runs it instead.
    SitePoller.objects.filter(pk=site.pk).update(lease_owner="", lease_expires_at=None)
    first = poller.poller_round(site.pk)  # its batch inserts the checkpoints
    waiting = rows.filter(status__in=TaggedCheckpoint.INSERTED).count()
    if waiting != expected or waiting < args.guards:
        raise SystemExit(
            f"expected {expected} rows waiting at {site.name} after the first round ({first}), found {waiting}"
        )
    time.sleep(0.5)  # the simulator's insert tasks complete: a due round lists the VPGs
    client = site_client(site)
    vpg = rows.values_list("vpg_identifier", flat=True).first()
    assert vpg is not None

    def round_at(offset: timedelta) -> Callable[[], None]:
        def prepare() -> None:
            rows.update(next_poll_at=timezone.now() + offset)
            SitePoller.objects.filter(pk=site.pk).update(lease_owner="", lease_expires_at=None)

        return prepare

    since = timezone.now() - timedelta(hours=1)
    samples: dict[str, list[float]] = {"idle": [], "due": [], "request": []}
    said: dict[str, str] = {}
    due_rounds = max(1, args.rounds // 5)
    for _ in range(args.repeats):
        ms, said["idle"] = _cpu_ms(round_at(timedelta(minutes=5)), lambda: poller.poller_round(site.pk), args.rounds)
        samples["idle"].append(ms)
        ms, said["due"] = _cpu_ms(round_at(-timedelta(seconds=1)), lambda: poller.poller_round(site.pk), due_rounds)
        samples["due"].append(ms)
        ms, _ = _cpu_ms(lambda: None, lambda: str(client.list_checkpoints(vpg, start=since)), due_rounds)
        samples["request"].append(ms)
    # What the last round of each kind did, as it says it (e.g. "0 inserted, 12 due, 0 listed, 0 ended, 2 requests").
    if not said["idle"].startswith("0 inserted, 0 due") or _requests(said["idle"]) != 0:
        raise SystemExit(f"a round with nothing due did more than that: {said['idle']}")
    due_requests = _requests(said["due"])
    if f"{waiting} due" not in said["due"] or due_requests == 0:
        raise SystemExit(f"a round with every row due did not ask about them all: {said['due']}")
    if rows.exclude(status__in=TaggedCheckpoint.INSERTED).exists():
        raise SystemExit("a row ended during the benchmark: the rounds measured were not the ones described")
    idle, due, request = (statistics.median(samples[k]) for k in ("idle", "due", "request"))
    print(
        f"guards={args.guards} rows waiting={waiting} rounds={args.rounds} (due: {due_rounds}) repeats={args.repeats}\n"
        f"a round with nothing due: {idle:.2f} ms of CPU (repeats: {_listed(samples['idle'])})\n"
        f"a round with its {waiting} rows due: {due:.2f} ms of CPU (repeats: {_listed(samples['due'])}); "
        f"it said: {said['due']}\n"
        f"one ZVM request (list_checkpoints) through the same client: {request:.2f} ms of CPU\n"
        f"the due round over its {due_requests} ZVM requests: {due / (due_requests * request):.2f}x"
    )
    figures.add("poll round with nothing due, CPU", idle, "ms", spread=spread_of(samples["idle"]))
    figures.add(
        "poll round with its rows due, CPU",
        due,
        "ms",
        reference=due_requests * request,
        reference_name=f"its {due_requests} ZVM requests through the same client",
        spread=spread_of(samples["due"]),
    )


def _cpu_ms(prepare: Callable[[], None], work: Callable[[], str], times: int) -> tuple[float, str]:
    """The process CPU of ``work`` per call, ``prepare`` run before each call outside the timing;
    and what its last call returned."""
    spent, said = 0.0, ""
    for _ in range(times):
        prepare()
        started = time.process_time()
        said = work()
        spent += time.process_time() - started
    return spent / times * 1000, said


def _requests(said: str) -> int:
    """The ZVM requests a round says it made."""
    found = re.search(r"(\d+) requests", said)
    return int(found.group(1)) if found else 0


def _listed(values: list[float]) -> str:
    return " ".join(f"{v:.2f}" for v in values)


if __name__ == "__main__":
    main()
