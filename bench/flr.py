#!/usr/bin/env python
"""Benchmark: recover a 1 GiB file through the whole FLR path, beside a plain download of it.

A generated file on db01 (the simulator streams it), a tagged checkpoint, then the live file overwritten; a
plain HTTPS GET of the same bytes with sha256 as the baseline, then the recovery from approval to "succeeded" by
a real worker, and that worker's peak RSS.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the repository must be importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench._common import REPO, Proc, django_setup, fresh_dir, register_sites, sim_control, start_sim, start_worker
from bench.figures import Report, parse_args

STATE = REPO / "var" / "bench-flr"
PATH = "/var/lib/bench/big.bin"
MIB = 1024 * 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=1024, help="size of the recovered file in MiB (default 1024)")
    args = parse_args(parser, quick={"mib": 128})
    figures = Report("flr", args)
    django_setup(fresh_dir(STATE))
    sim, url = start_sim(STATE)
    worker: Proc | None = None
    try:
        worker = start_worker(STATE, concurrency=1, name="bench-flr")
        run(url, args.mib * MIB, worker, figures)
        figures.write()
    finally:
        if worker is not None:
            worker.stop(timeout=30)
        sim.stop()


def run(url: str, size: int, worker: Proc, figures: Report) -> None:
    from django.contrib.auth.models import Permission, User
    from django.utils import timezone

    from recoveries.services import recovery_request_approve, recovery_request_create
    from rewind.models import Agent, ChangeGuard, TaggedCheckpoint
    from rewind.sites import site_client

    control = sim_control()
    sites = register_sites(url, ("site-a", "site-b"))
    owner = User.objects.create_user("owner")
    approver = User.objects.create_user("approver", is_staff=True)
    approver.user_permissions.add(Permission.objects.get(codename="approve_recovery"))
    approver = User.objects.get(pk=approver.pk)
    agent = Agent.objects.create(name="bench", owner=owner)

    control.put(
        f"{url}/_sim/vms/db01/files", json={"path": PATH, "size": size, "seed": 11}, timeout=60
    ).raise_for_status()
    info = control.get(f"{url}/_sim/vms/db01", timeout=30).json()
    vpg = info["vpgs"][0]
    tag = f"ai:bench | edit | vm=db01 | change=bench | {timezone.now():%Y-%m-%dT%H:%M:%SZ}"
    client = site_client(sites[vpg["protected"]])
    task = client.insert_tagged_checkpoint(vpg["identifier"], tag)
    while not client.get_task(task).completed:
        time.sleep(0.1)
    cp = next(c for c in client.list_checkpoints(vpg["identifier"]) if c.tag == tag)
    assert cp.identifier is not None
    guard = ChangeGuard.objects.create(
        agent_name="bench",
        action="edit",
        vm_identifier=info["identifier"],
        vm_name="db01",
        change_id="bench",
        tag=tag,
        status="ok",
        timeout_s=60,
    )
    TaggedCheckpoint.objects.create(
        guard=guard,
        vpg_identifier=vpg["identifier"],
        vpg_name=vpg["name"],
        recovery_site_identifier=sites[vpg["recovery"]].identifier,
        recovery_site_name=sites[vpg["recovery"]].name,
        checkpoint_identifier=cp.identifier,
        checkpoint_timestamp=cp.timestamp,
        status="listed",
    )

    # Baseline: the same bytes over plain HTTPS from the simulator, hashed and written to disk.
    baseline_file = STATE / "baseline.bin"
    started = time.perf_counter()
    digest = hashlib.sha256()
    with (
        control.get(f"{url}/_sim/vms/db01/files", params={"path": PATH}, stream=True, timeout=600) as resp,
        baseline_file.open("wb") as out,
    ):
        resp.raise_for_status()
        for chunk in resp.iter_content(MIB):
            digest.update(chunk)
            out.write(chunk)
    baseline = time.perf_counter() - started
    baseline_file.unlink()
    control.put(f"{url}/_sim/vms/db01/files", json={"path": PATH, "text": "overwritten"}, timeout=60).raise_for_status()

    recovery = recovery_request_create(agent=agent, vm="db01", path=PATH, reason="benchmark")
    started = time.perf_counter()
    recovery_request_approve(recovery_id=recovery.pk, user=approver)
    deadline = time.monotonic() + 1800
    while time.monotonic() < deadline:
        recovery.refresh_from_db()
        if recovery.status in ("succeeded", "failed"):
            break
        time.sleep(0.2)
    wall = time.perf_counter() - started
    peak_mib = worker.children_peak_rss_kib() / 1024
    runner = (
        (recovery.finished_at - recovery.started_at).total_seconds()
        if recovery.finished_at and recovery.started_at
        else float("nan")
    )

    print(f"file: {size / MIB:.0f} MiB generated on db01, recovered from checkpoint {cp.identifier} via Site B")
    print(f"status: {recovery.status}{' — ' + recovery.error if recovery.error else ''}")
    print(
        f"sha256 matches the live bytes before the overwrite: {recovery.sha256 == digest.hexdigest()}; "
        f"size {recovery.size}; unmount ok: {recovery.unmount_ok}"
    )
    print(f"plain HTTPS download (+ sha256 + write): {baseline:.2f} s ({size / MIB / baseline:.0f} MiB/s)")
    print(f"recovery, approval -> succeeded: {wall:.2f} s; runner alone: {runner:.2f} s")
    print(f"ratio recovery/plain: {wall / baseline:.2f} (runner alone {runner / baseline:.2f})")
    print(f"worker pool peak RSS: {peak_mib:.0f} MiB (target <= 150 MB = {150e6 / MIB:.0f} MiB)")
    mib = size / MIB
    figures.add(
        f"recovery of {mib:.0f} MiB, approval -> succeeded",
        wall,
        "s",
        reference=baseline,
        reference_name="a plain HTTPS download of the bytes",
    )
    figures.add(f"recovery of {mib:.0f} MiB: worker pool peak RSS", peak_mib, "MiB", target=150e6 / MIB)
    figures.add(
        f"recovery of {mib:.0f} MiB: sha256 matches",
        float(recovery.sha256 == digest.hexdigest()),
        better="higher",
        target=1,
    )
    if recovery.stored_path:
        Path(recovery.stored_path).unlink(missing_ok=True)


if __name__ == "__main__":
    main()
