"""What waited is told the truth about a task-queue outage (rewind/workers: BrokerOutage and its readers).

On the production shape (tests.stackfixtures), its private Redis stopped while a guard waits: the
waiting call's progress and answer name the outage, and the guard, which timed out meanwhile,
says the queue was down then, not only "not listed within N s".
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tests.fixtures import wait_until
from tests.helpers import run, tool_text
from tests.stackfixtures import ProductionStack

pytestmark = pytest.mark.process

TIMEOUT_S = 12.0  # the guard's own: the outage outlasts it


def test_a_guard_waiting_while_redis_is_down_is_told_so_and_its_timeout_names_the_outage(
    production_stack: ProductionStack,
) -> None:
    stack = production_stack
    stack.sim.clear_faults()
    stack.sim.add_fault("checkpoint_listing_delay", seconds=120)  # listed long after the guard gave up
    progress: list[Any] = []
    answer: list[Any] = []
    args = {"vm": "web01", "action": "redis down", "timeout_s": TIMEOUT_S}
    call = threading.Thread(
        target=lambda: answer.append(
            run(stack.call_async("zerto_create_tagged_checkpoint", args, replica=2, progress=progress))
        )
    )
    call.start()
    try:
        first = wait_until(lambda: [p for p in progress if "guard #" in (p[2] or "")], 60, what="the first progress")
        guard_id = int(first[0][2].split("#", 1)[1].split(":", 1)[0])
        stack.wait_guard(guard_id, lambda g: any(v["status"] == "waiting" for v in g["vpgs"]))
        stack.redis.stop()
        call.join(TIMEOUT_S + 30)
        assert not call.is_alive(), "the waiting call did not answer by its deadline"
    finally:
        stack.redis.start()
    result = answer[0]
    assert result.is_error
    text = tool_text(result)
    assert text.startswith("DO NOT PROCEED")
    assert "the task queue (Redis at 127.0.0.1:" in text, text
    assert "has not answered since" in text, text
    assert any("the task queue" in (p[2] or "") for p in progress), progress

    # Once Redis answers, the guard's round runs again and ends it, naming the outage it met.
    final = stack.guard_finished(guard_id)
    stack.sim.clear_faults()
    assert not final["ok"]
    errors = " ".join(v["error"] or "" for v in final["vpgs"])
    assert "not listed within 12 s" in errors, final
    assert "the task queue (Redis at 127.0.0.1:" in errors, final
    assert "did not answer from" in errors, final
    assert "so no poll round could run meanwhile" in errors
