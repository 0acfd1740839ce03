"""Celery workers survive their broker (rewind/lib/redisbroker.py): Redis restarted with a guard waiting.

On the production shape (tests.stackfixtures): with kombu's own transport every worker holding a
poll round's message died at such a restart ("Unrecoverable error: AttributeError("'NoneType'
object has no attribute 'hostname'")"), and nothing ran until a person restarted them.
"""

from __future__ import annotations

import pytest

from tests.stackfixtures import ProductionStack

pytestmark = pytest.mark.process

WORKERS = ("worker-1", "worker-2")


def test_a_redis_restart_with_a_guard_waiting_leaves_every_worker_up_and_the_guard_ends_ok(
    production_stack: ProductionStack,
) -> None:
    stack = production_stack
    stack.sim.clear_faults()
    stack.sim.add_fault("checkpoint_listing_delay", seconds=6)
    workers = {name: stack.pid(name) for name in WORKERS}
    try:
        # Inserted and waiting to be listed: the poller's next round is a message a worker holds.
        out = stack.start_guard("web01", "redis restart")
        stack.redis.restart(down_s=0.35)
        final = stack.guard_finished(out["id"])
    finally:
        stack.sim.clear_faults()
    assert final["ok"], final
    assert {name: stack.pid(name) for name in WORKERS} == workers, "a worker died and was started again"
    assert "Unrecoverable error" not in stack.output()
    assert "Connection to broker lost" in stack.output()  # it did see the restart
