"""A guard's call cut by the death of its web replica: the agent learns the outcome, and never pins twice.

On the production shape (tests.stackfixtures). The call's first progress notification names the
guard and its change id; the replica serving the call is SIGKILLed; the call fails at once (not
at its client's timeout); the same call sent again with that change id to the other replica
returns the same guard, ok, with one tagged checkpoint per VPG.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import tagged_rows
from tests.stackfixtures import ProductionStack

pytestmark = pytest.mark.process


def test_a_call_cut_by_its_replica_dying_is_answered_by_a_retry_with_its_change_id(
    production_stack: ProductionStack,
) -> None:
    stack = production_stack
    stack.sim.clear_faults()
    stack.sim.add_fault("checkpoint_listing_delay", seconds=5)
    args: dict[str, Any] = {"vm": "web01", "action": "replica killed"}
    cut = stack.in_background("zerto_create_tagged_checkpoint", args, replica=2)
    try:
        guard_id, change_id = cut.guard_refs()
        killed = stack.kill("web-2")
        # The broken connection is noticed at once, not at the client's timeout.
        assert isinstance(cut.outcome(30), BaseException)

        again = stack.call("zerto_create_tagged_checkpoint", {**args, "change_id": change_id}, replica=1)
        stack.wait_started_again("web-2", killed)
    finally:
        stack.sim.clear_faults()
    assert not again.is_error, again.content
    answer = again.structured_content
    assert (answer["id"], answer["change_id"], answer["reused"], answer["ok"]) == (guard_id, change_id, True, True)
    for vpg in stack.sim.vm("web01")["vpgs"]:
        assert len(tagged_rows(stack.sim, vpg["protected"], vpg["name"], answer["tag"])) == 1, vpg["name"]
