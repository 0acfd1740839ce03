"""A guarded call survives a short database outage, and its agent always learns which guard it started.

On the production shape (tests.stackfixtures), its private PostgreSQL restarted while a guard's
call waits: the call's reads and its audit row are retried until the database answers, the first
progress notification already named the guard and its change id, and the audit row is written
(fail-closed: an answer nobody recorded is never given).
"""

from __future__ import annotations

import time

import pytest

from tests.fixtures import wait_until
from tests.stackfixtures import ProductionStack

pytestmark = pytest.mark.process

OUTAGE_S = 2.0


def test_a_database_restart_while_a_guard_call_waits_is_retried_and_the_call_answers_ok(
    production_stack: ProductionStack,
) -> None:
    stack = production_stack
    stack.sim.clear_faults()
    stack.sim.add_fault("checkpoint_listing_delay", seconds=6)
    call = stack.in_background("zerto_create_tagged_checkpoint", {"vm": "web01", "action": "db blip"})
    try:
        guard_id, change_id = call.guard_refs()
        stopped = time.monotonic()
        stack.postgres.stop()
        assert stack.ready(1).status_code == 503
        assert stack.ready(2).json() == {"ready": False, "database": "not answering (OperationalError)"}
        time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - stopped)))  # the outage itself, as measured
        stack.postgres.start()
        result = call.outcome(120)
    finally:
        stack.sim.clear_faults()
    assert not result.is_error, result.content
    assert result.structured_content["id"] == guard_id
    assert result.structured_content["change_id"] == change_id
    assert stack.ready(1).ok
    rows = stack.sql(
        "SELECT data->>'outcome' FROM rewind_auditevent WHERE action = 'mcp.tool.called'"
        " AND data->'arguments'->>'action' = 'db blip'"
    )
    assert rows.split() == ["ok"], "the call's audit row is written once the database answers"
    assert "audit chain OK" in stack.manage("audit_verify")

    # The workers' heartbeats write again after the restart, or every worker would read as dead
    # from now on (their thread kept the connection the restart broke).
    restarted_at = stack.sql("SELECT now()").strip()
    beating = f"SELECT count(*) FROM rewind_workerheartbeat WHERE seen_at > '{restarted_at}'"
    wait_until(lambda: stack.sql(beating).strip() == str(stack.WORKERS), 30, what="every worker beating again")
