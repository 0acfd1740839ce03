"""What waited is told the truth about a task-queue outage (rewind/workers: BrokerOutage and its readers).

On the production shape (tests.stackfixtures), its private Redis stopped while a guard waits: the
waiting call's progress and answer name the outage, and the guard, which timed out meanwhile,
says the queue was down then, not only "not listed within N s".
"""

from __future__ import annotations

import pytest

from tests.fixtures import wait_until
from tests.helpers import tool_text
from tests.stackfixtures import ProductionStack

pytestmark = pytest.mark.process

TIMEOUT_S = 20.0  # the guard's own: the outage outlasts it


def test_a_guard_waiting_while_redis_is_down_is_told_so_and_its_timeout_names_the_outage(
    production_stack: ProductionStack,
) -> None:
    stack = production_stack
    stack.sim.clear_faults()
    stack.sim.add_fault("checkpoint_listing_delay", seconds=120)  # listed long after the guard gave up
    args = {"vm": "web01", "action": "redis down", "timeout_s": TIMEOUT_S}
    call = stack.in_background("zerto_create_tagged_checkpoint", args, replica=2)
    try:
        guard_id, _change = call.guard_refs()
        stack.wait_guard(guard_id, lambda g: any(v["status"] == "waiting" for v in g["vpgs"]))
        stack.redis.stop()
        # A worker's heartbeat notices within a beat or two; the call is still waiting then.
        open_outages = "SELECT count(*) FROM rewind_brokeroutage WHERE ended_at IS NULL"
        try:
            wait_until(lambda: stack.sql(open_outages).strip() == "1", TIMEOUT_S, what="the outage noticed")
        except AssertionError as exc:  # what the stack's processes said meanwhile, to tell why
            raise AssertionError(f"{exc}\n{stack.output()[-6000:]}") from None
        result = call.outcome(TIMEOUT_S + 30)  # the waiting call answers by its deadline
    finally:
        stack.redis.start()
    assert result.is_error
    text = tool_text(result)
    assert text.startswith("DO NOT PROCEED")
    assert "the task queue (Redis at 127.0.0.1:" in text, text
    assert "has not answered since" in text, text
    assert any("the task queue" in (p[2] or "") for p in call.progress), call.progress

    # Once Redis answers, the guard's round runs again and ends it, naming the outage it met.
    final = stack.guard_finished(guard_id)
    stack.sim.clear_faults()
    assert not final["ok"]
    errors = " ".join(v["error"] or "" for v in final["vpgs"])
    assert f"not listed within {TIMEOUT_S:.0f} s" in errors, final
    assert "the task queue (Redis at 127.0.0.1:" in errors, final
    assert "did not answer from" in errors, final
    assert "so no poll round could run meanwhile" in errors
