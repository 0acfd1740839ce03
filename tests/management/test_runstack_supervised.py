"""``manage.py runstack --replicas 2 --celery-workers 2`` supervises: a process killed is started again.

On the production shape of tests.stackfixtures: the Celery workers' main processes, a web
replica and the beat are SIGKILLed while a guard waits. The other replica keeps answering, each
killed process is started again, and the guard ends ok without anyone restarting anything. And
with the beat stopped, guards and recoveries still end right.
"""

from __future__ import annotations

import os
import signal

import pytest

from tests.stackfixtures import ProductionStack

pytestmark = pytest.mark.process

KILLED = ("worker-1", "worker-2", "web-2", "beat")
NGINX = "/etc/nginx/nginx.conf"


def test_killed_processes_are_started_again_while_the_others_serve_and_a_waiting_guard_ends_ok(
    production_stack: ProductionStack,
) -> None:
    stack = production_stack
    stack.sim.clear_faults()
    stack.sim.add_fault("checkpoint_listing_delay", seconds=4)
    try:
        out = stack.start_guard("web01", "kill -9")
        killed = {name: stack.kill(name) for name in KILLED}
        # The other replica serves while web-2 is down: the guard's status through it.
        assert stack.guard(out["id"], replica=1)["id"] == out["id"]
        for name, pid in killed.items():
            stack.wait_started_again(name, pid)
        final = stack.guard_finished(out["id"])
    finally:
        stack.sim.clear_faults()
    assert final["ok"], final
    assert stack.guard(out["id"], replica=2)["ok"]  # the restarted replica serves it too
    for name in KILLED:
        assert f"{name} exited with code -9; starting it again in" in stack.output()
        assert f"{name} started again (pid" in stack.output()


def test_with_the_beat_stopped_a_guard_whose_workers_died_and_a_recovery_still_end_right(
    production_stack: ProductionStack,
) -> None:
    # The beat restarts dead pollers and reaps; while it is stopped (SIGSTOP: alive, doing nothing,
    # as a hung beat is), a waiting call's own status reads restart the poller its killed workers
    # held, and a recovery runs without it. One reaper run afterwards leaves no mount.
    stack = production_stack
    beat = stack.pid("beat")
    os.killpg(beat, signal.SIGSTOP)
    stack.sim.clear_faults()
    stack.sim.add_fault("checkpoint_listing_delay", seconds=4)
    try:
        out = stack.start_guard("web01", "no beat", change_id="CHG-nobeat")
        killed = {name: stack.kill(name) for name in ("worker-1", "worker-2")}
        for name, pid in killed.items():
            stack.wait_started_again(name, pid)
        final = stack.guard_finished(out["id"])
        stack.sim.clear_faults()
        recovery = stack.recover("web01", NGINX, "CHG-nobeat")
        stack.approve(recovery)
        done = stack.recovery_finished(recovery)
    finally:
        stack.sim.clear_faults()
        os.killpg(beat, signal.SIGCONT)
    assert final["ok"], final
    assert done["status"] == "succeeded", done
    assert stack.pid("beat") == beat  # stopped is not dead: the supervisor left it alone
    stack.manage("reap")
    assert stack.live_sessions() == []
    assert "audit chain OK" in stack.manage("audit_verify")
