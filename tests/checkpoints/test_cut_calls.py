"""A guard's call cut by the death of its web replica: the agent learns the outcome, and never pins twice.

On the production shape (tests.stackfixtures). The call's first progress notification names the
guard and its change id; the replica serving the call is SIGKILLed; the call fails at once (not
at its client's timeout); the same call sent again with that change id to the other replica
returns the same guard, ok, with one tagged checkpoint per VPG.
"""

from __future__ import annotations

import re
import threading
from typing import Any

import pytest

from tests.fixtures import wait_until
from tests.helpers import run, tagged_rows
from tests.stackfixtures import ProductionStack

pytestmark = pytest.mark.process

FIRST_PROGRESS = re.compile(r"^guard #(\d+) \(change_id (chg-[0-9a-f]+)\): ")


def test_a_call_cut_by_its_replica_dying_is_answered_by_a_retry_with_its_change_id(
    production_stack: ProductionStack,
) -> None:
    stack = production_stack
    stack.sim.clear_faults()
    stack.sim.add_fault("checkpoint_listing_delay", seconds=5)
    progress: list[Any] = []
    outcome: list[Any] = []
    args: dict[str, Any] = {"vm": "web01", "action": "replica killed"}

    def cut_call() -> None:
        try:
            outcome.append(run(stack.call_async("zerto_create_tagged_checkpoint", args, replica=2, progress=progress)))
        except BaseException as exc:  # what the agent's client raises when the stream breaks
            outcome.append(exc)

    call = threading.Thread(target=cut_call)
    call.start()
    try:
        first = FIRST_PROGRESS.match(wait_until(lambda: progress, 60, what="the first progress")[0][2])
        assert first, progress
        guard_id, change_id = int(first.group(1)), first.group(2)
        killed = stack.kill("web-2")
        call.join(30)  # the broken connection is noticed at once, not at the client's timeout
        assert not call.is_alive(), "the agent's call hung after its replica died"
        assert isinstance(outcome[0], BaseException), outcome

        again = stack.call("zerto_create_tagged_checkpoint", {**args, "change_id": change_id}, replica=1)
        stack.wait_started_again("web-2", killed)
    finally:
        stack.sim.clear_faults()
    assert not again.is_error, again.content
    answer = again.structured_content
    assert (answer["id"], answer["change_id"], answer["reused"], answer["ok"]) == (guard_id, change_id, True, True)
    for vpg in stack.sim.vm("web01")["vpgs"]:
        assert len(tagged_rows(stack.sim, vpg["protected"], vpg["name"], answer["tag"])) == 1, vpg["name"]
