"""``manage.py runstack --replicas 2 --celery-workers 2`` supervises: a process killed is started again.

On the production shape of tests.stackfixtures: the Celery workers' main processes, a web
replica and the beat are SIGKILLed while a guard waits. The other replica keeps answering, each
killed process is started again, and the guard ends ok without anyone restarting anything.
"""

from __future__ import annotations

import pytest

from tests.helpers import tool_ok
from tests.stackfixtures import ProductionStack

pytestmark = pytest.mark.process

KILLED = ("worker-1", "worker-2", "web-2", "beat")


def test_killed_processes_are_started_again_while_the_others_serve_and_a_waiting_guard_ends_ok(
    production_stack: ProductionStack,
) -> None:
    stack = production_stack
    stack.sim.clear_faults()
    stack.sim.add_fault("checkpoint_listing_delay", seconds=4)
    try:
        out = tool_ok(stack.call("zerto_create_tagged_checkpoint", {"vm": "web01", "action": "kill -9", "wait": False}))
        stack.wait_guard(out["id"], lambda g: any(v["status"] == "waiting" for v in g["vpgs"]))
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
