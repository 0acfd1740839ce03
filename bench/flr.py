#!/usr/bin/env python
"""Benchmark: recover a 1 GiB file through the whole FLR path, beside a plain download of it.

    .venv/bin/python bench/flr.py [--mib 1024]

What it does, all on 127.0.0.1, every process bounded and stopped at the end:
1. a fresh state folder (SQLite + filesystem broker) under var/bench-flr, migrated;
2. the ZVM simulator; sites "Site A" and "Site B" registered against it; a real Celery
   worker (prefork, one child) on that state;
3. a generated file of --mib MiB on db01 (the simulator streams it, never holding it whole),
   a tagged checkpoint of vpg-db, then the live file is overwritten;
4. baseline: a plain HTTPS GET of the same bytes from the simulator's control API, streamed
   to a file with sha256 (the same work the runner does with the bytes);
5. the recovery: request, approval, then the worker mounts, maps the path, downloads to
   REWIND_STORAGE_DIR with sha256, unmounts. Timed from the approval to "succeeded", and the
   runner's own time (started_at -> finished_at);
6. the worker pool process's peak RSS (VmHWM from /proc), target <= 150 MB.

Prints the figures and the ratio to the baseline. No asserts: it measures and reports.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PYTHON = str(REPO / ".venv" / "bin" / "python") if (REPO / ".venv" / "bin" / "python").exists() else sys.executable
STATE = REPO / "var" / "bench-flr"
PATH = "/var/lib/bench/big.bin"
MIB = 1024 * 1024


def start_sim() -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([PYTHON, "-m", "zvmsim", "--port", "0", "--cert-dir", str(STATE / "certs")], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.startswith("zvmsim ready on "):
            return proc, line.split("zvmsim ready on ", 1)[1].strip()
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise SystemExit("the simulator did not start")


def setup_django() -> None:
    if STATE.exists():
        shutil.rmtree(STATE)
    STATE.mkdir(parents=True)
    os.environ["REWIND_VAR_DIR"] = str(STATE)
    for name in ("DATABASE_URL", "REDIS_URL"):
        os.environ.pop(name, None)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "rewind.settings")
    subprocess.run([PYTHON, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=REPO, check=True, env={**os.environ})
    sys.path.insert(0, str(REPO))
    import django

    django.setup()


def start_worker() -> subprocess.Popen[bytes]:
    log = (STATE / "worker.log").open("wb")
    proc = subprocess.Popen([PYTHON, "-m", "celery", "-A", "rewind", "worker", "-P", "prefork", "-c", "1",
                             "--loglevel", "INFO", "--without-gossip", "--without-mingle", "-n", "bench-flr@%h"],
                            cwd=REPO, env={**os.environ}, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if b"ready." in (STATE / "worker.log").read_bytes():
            return proc
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    raise SystemExit(f"the worker did not start; see {STATE / 'worker.log'}")


def pool_peak_rss_kib(parent: int) -> int:
    peak = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            lines = Path(f"/proc/{pid}/status").read_text().splitlines()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in lines if ":" in line)
        if fields.get("PPid", "").strip() == str(parent) and "VmHWM" in fields:
            peak = max(peak, int(fields["VmHWM"].split()[0]))
    return peak


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=1024)
    args = parser.parse_args()
    setup_django()
    sim, url = start_sim()
    worker = None
    try:
        worker = start_worker()
        run(url, args.mib * MIB, worker)
    finally:
        if worker is not None and worker.poll() is None:
            os.killpg(worker.pid, signal.SIGTERM)
            worker.wait(timeout=30)
        sim.terminate()
        sim.wait(timeout=10)


def run(url: str, size: int, worker: subprocess.Popen[bytes]) -> None:
    import requests
    import urllib3
    from django.contrib.auth.models import Permission, User
    from django.utils import timezone

    from recoveries.models import RecoveryRequest
    from recoveries.services import recovery_request_approve, recovery_request_create
    from rewind.audit import Actor
    from rewind.models import Agent, ChangeGuard, ChangeGuardVpg
    from rewind.sites import site_check, site_client, site_create

    urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
    control = requests.Session()
    control.verify, control.trust_env = False, False
    actor = Actor.system("bench")
    sites = {}
    for name, slug in (("Site A", "site-a"), ("Site B", "site-b")):
        site = site_create(actor=actor, name=name, base_url=f"{url}/{slug}", username="admin", password="zerto")
        site_check(site=site)
        site.refresh_from_db()
        sites[slug] = site
    owner = User.objects.create_user("owner")
    approver = User.objects.create_user("approver", is_staff=True)
    approver.user_permissions.add(Permission.objects.get(codename="approve_recovery"))
    approver = User.objects.get(pk=approver.pk)
    agent = Agent.objects.create(name="bench", owner=owner)

    control.put(f"{url}/_sim/vms/db01/files", json={"path": PATH, "size": size, "seed": 11}, timeout=60).raise_for_status()
    info = control.get(f"{url}/_sim/vms/db01", timeout=30).json()
    vpg = info["vpgs"][0]
    tag = f"ai:bench | edit | vm=db01 | change=bench | {timezone.now():%Y-%m-%dT%H:%M:%SZ}"
    client = site_client(sites[vpg["protected"]])
    task = client.insert_tagged_checkpoint(vpg["identifier"], tag)
    while not client.get_task(task).completed:
        time.sleep(0.1)
    cp = next(c for c in client.list_checkpoints(vpg["identifier"]) if c.tag == tag)
    guard = ChangeGuard.objects.create(agent_name="bench", action="edit", vm_identifier=info["identifier"], vm_name="db01",
                                       change_id="bench", tag=tag, status="ok", timeout_s=60)
    ChangeGuardVpg.objects.create(guard=guard, vpg_identifier=vpg["identifier"], vpg_name=vpg["name"],
                                  recovery_site_identifier=sites[vpg["recovery"]].identifier,
                                  recovery_site_name=sites[vpg["recovery"]].name,
                                  checkpoint_identifier=cp.identifier, checkpoint_timestamp=cp.timestamp, status="listed")

    # Baseline: the same bytes over plain HTTPS from the simulator, hashed and written to disk.
    baseline_file = STATE / "baseline.bin"
    started = time.perf_counter()
    digest = hashlib.sha256()
    with control.get(f"{url}/_sim/vms/db01/files", params={"path": PATH}, stream=True, timeout=600) as resp, \
            baseline_file.open("wb") as out:
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
    peak_mib = pool_peak_rss_kib(worker.pid) / 1024
    runner = (recovery.finished_at - recovery.started_at).total_seconds() if recovery.finished_at and recovery.started_at else float("nan")

    print(f"file: {size / MIB:.0f} MiB generated on db01, recovered from checkpoint {cp.identifier} via Site B")
    print(f"status: {recovery.status}{' — ' + recovery.error if recovery.error else ''}")
    print(f"sha256 matches the live bytes before the overwrite: {recovery.sha256 == digest.hexdigest()}; "
          f"size {recovery.size}; unmount ok: {recovery.unmount_ok}")
    print(f"plain HTTPS download (+ sha256 + write): {baseline:.2f} s ({size / MIB / baseline:.0f} MiB/s)")
    print(f"recovery, approval -> succeeded: {wall:.2f} s; runner alone: {runner:.2f} s")
    print(f"ratio recovery/plain: {wall / baseline:.2f} (runner alone {runner / baseline:.2f})")
    print(f"worker pool peak RSS: {peak_mib:.0f} MiB (target <= 150 MB = {150e6 / MIB:.0f} MiB)")
    if recovery.stored_path:
        Path(recovery.stored_path).unlink(missing_ok=True)


if __name__ == "__main__":
    main()
