"""One process's clock five minutes ahead (rewind/lib/dbclock.py), mid-guard and mid-recovery, on the production shape.

The stack's two workers are paused (SIGSTOP) and a third, whose clock runs 300 s ahead of every
other process's and of the database's (time-machine, started by a ``sitecustomize`` of the
test's, never by the service), takes the work. Its rounds do not end a guard whose 300 s have
not passed, its recovery comes back byte-exact, no mount is left after one reaper run, and the
workers' list shows how far its clock is off.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from rewind.lib.processes import Proc
from tests.fixtures import wait_until
from tests.helpers import READY
from tests.simfixtures import PYTHON, REPO
from tests.stackfixtures import ProductionStack

pytestmark = pytest.mark.process

AHEAD_S = 300
NGINX = "/etc/nginx/nginx.conf"
SKEW = f"""
import datetime, time_machine
time_machine.travel(datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds={AHEAD_S}), tick=True).start()
"""


def _blocked_in_brpop(stack: ProductionStack) -> int:
    """How many broker clients wait for a message now (a paused worker's last one ends within 1 s)."""
    listing = subprocess.run(
        ["redis-cli", "-p", str(stack.redis.port), "client", "list"], capture_output=True, text=True, check=True
    ).stdout
    return sum(1 for line in listing.splitlines() if "cmd=brpop" in line and " flags=b " in f" {line} ")


@pytest.fixture
def skewed_worker(production_stack: ProductionStack, tmp_path: Path) -> Iterator[Proc]:
    stack = production_stack
    (tmp_path / "sitecustomize.py").write_text(SKEW)
    env = {**stack.env, "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}"}
    argv = [PYTHON, "-m", "celery", "-A", "rewind", "worker", "-n", "skewed@%h", "-c", "2", "--loglevel", "INFO"]
    worker = Proc("skewed worker", argv, log=tmp_path / "skewed.log", cwd=REPO, env=env)
    paused = [stack.pid(name) for name in ("worker-1", "worker-2")]
    try:
        worker.wait_for_output(READY)
        for pid in paused:
            os.killpg(pid, signal.SIGSTOP)
        # A paused worker's last wait for a message ends within its 1 s: after that, only the
        # skewed worker takes what is queued.
        wait_until(lambda: _blocked_in_brpop(stack) == 1, 30, what="only the skewed worker waiting for messages")
        yield worker
    finally:
        worker.stop(timeout=20)
        for pid in paused:
            os.killpg(pid, signal.SIGCONT)


def test_a_worker_five_minutes_ahead_ends_a_guard_and_a_recovery_truthfully(
    production_stack: ProductionStack, skewed_worker: Proc
) -> None:
    stack = production_stack
    stack.sim.clear_faults()
    stack.sim.add_fault("checkpoint_listing_delay", seconds=4)
    try:
        guard = stack.guarded("web01", "CHG-skewed")  # timeout 300 s: its own clock says it passed at once
    finally:
        stack.sim.clear_faults()
    assert guard["ok"], guard
    assert "poll_site" in skewed_worker.output()  # its rounds served the guard

    wanted = hashlib.sha256(stack.sim.read_file("web01", NGINX)).hexdigest()
    recovery = stack.recover("web01", NGINX, "CHG-skewed")
    stack.approve(recovery)
    out = stack.recovery_finished(recovery)
    assert out["status"] == "succeeded", out
    assert out["result"]["sha256"] == wanted
    assert "recoveries.run" in skewed_worker.output()

    offset = float(stack.sql("SELECT clock_offset_s FROM rewind_workerheartbeat WHERE hostname LIKE 'skewed@%'"))
    assert AHEAD_S - 10 < offset < AHEAD_S + 10
    stack.manage("reap")
    assert stack.live_sessions() == []
    assert "audit chain OK" in stack.manage("audit_verify")
