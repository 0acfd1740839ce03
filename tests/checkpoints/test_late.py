"""Checkpoints Zerto lists only after their guard timed out: recorded as listed late, usable to recover.

The simulator's ``checkpoint_listing_delay`` is longer than the guard's ``timeout_s``, so the
guard fails with the VPG row timed out; the checkpoint shows up a few seconds later.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from recoveries.models import RecoveryRequest
from recoveries.services import recovery_request_create
from rewind.checkpoints.late import checkpoints_listed_late_sweep
from rewind.checkpoints.presenters import guard_report
from rewind.checkpoints.services import guard_create
from rewind.models import AuditEvent, ChangeGuard, TaggedCheckpoint
from tests.fixtures import InlineTasks, wait_until
from tests.helpers import run, tagged_rows, wait_guard_finished
from tests.mcpfixtures import make_agent_token

pytestmark = pytest.mark.timeout(300)
DELAY_S = 6.0


def _timed_out_guard(sim: Any, agent: Any, change_id: str, tasks: InlineTasks | None = None) -> ChangeGuard:
    sim.add_fault("checkpoint_listing_delay", seconds=DELAY_S, count=1)
    outcome = guard_create(
        agent_name=agent.name, agent_id=agent.pk, vm="db01", action="edit my.cnf", change_id=change_id, timeout_s=1
    )
    assert outcome.guard is not None
    guard = wait_guard_finished(outcome.guard, tasks=tasks)
    assert guard.status == ChangeGuard.Status.FAILED
    row = guard.vpgs.get()
    assert row.status == TaggedCheckpoint.Status.TIMED_OUT
    assert not row.checkpoint_identifier
    assert row.insert_started_at
    return guard


def _wait_listed_on_zvm(sim: Any, guard: ChangeGuard) -> dict[str, Any]:
    rows = wait_until(
        lambda: tagged_rows(sim, "site-a", "vpg-db", guard.tag),
        DELAY_S + 20,
        what="the simulator listing the checkpoint",
        every=0.3,
    )
    return rows[0]


def _late_events(guard: ChangeGuard) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action="guard.checkpoint.listed_late", target_id=str(guard.pk)))


def test_a_checkpoint_listed_after_the_timeout_is_recorded_late_and_recoverable(
    sim: Any, sites: Any, agent: Any, inline_tasks: InlineTasks
) -> None:
    guard = _timed_out_guard(sim, agent, "chg-late-1", tasks=inline_tasks)

    # Not listed yet: the sweep looks, finds nothing, records nothing.
    early = checkpoints_listed_late_sweep()
    assert early.vpgs_listed == 1
    assert early.recorded == 0
    assert not _late_events(guard)

    listed = _wait_listed_on_zvm(sim, guard)
    report = checkpoints_listed_late_sweep()

    assert report.recorded == 1
    assert not report.errors
    row = guard.vpgs.get()
    assert row.status == TaggedCheckpoint.Status.TIMED_OUT  # what the agent was told does not change
    assert row.listed_late_at is not None
    assert row.checkpoint_identifier == listed["CheckpointIdentifier"]
    assert row.checkpoint_timestamp is not None
    guard.refresh_from_db()
    assert guard.status == ChangeGuard.Status.FAILED
    report_out = guard_report(guard)
    assert report_out.ok is False
    assert report_out.listed == 0
    assert report_out.vpgs[0].listed_late_at is not None
    [event] = _late_events(guard)
    assert event.data["checkpoint_identifier"] == row.checkpoint_identifier
    assert event.data["vpg"] == "vpg-db"

    # Repeat sweeps neither list again nor record twice.
    again = checkpoints_listed_late_sweep()
    assert again.vpgs_listed == 0
    assert again.recorded == 0
    assert len(_late_events(guard)) == 1

    # A recovery by change id, and by default (the newest tagged checkpoint), uses it and says so.
    by_change = recovery_request_create(
        agent=agent, vm="db01", path="/etc/my.cnf", reason="undo", change_id="chg-late-1"
    )
    assert by_change.checkpoint_identifier == row.checkpoint_identifier
    assert by_change.checkpoint_listed_late_at == row.listed_late_at
    requested = AuditEvent.objects.get(action="recoveries.request.requested", target_id=str(by_change.pk))
    assert requested.data["checkpoint_listed_late"] is True
    by_default = recovery_request_create(agent=agent, vm="db01", path="/etc/my.cnf", reason="undo")
    assert by_default.checkpoint_identifier == row.checkpoint_identifier
    assert by_default.checkpoint_listed_late_at is not None


def test_a_listing_error_records_nothing(sim: Any, sites: Any, agent: Any, inline_tasks: InlineTasks) -> None:
    guard = _timed_out_guard(sim, agent, "chg-late-2", tasks=inline_tasks)
    _wait_listed_on_zvm(sim, guard)
    sim.add_fault("http_error", site="site-a", status=500, path_regex="/checkpoints$", method="GET")

    report = checkpoints_listed_late_sweep()

    assert report.recorded == 0
    assert report.vpgs_listed == 0
    assert list(report.errors) == ["Site A/vpg-db"]
    row = guard.vpgs.get()
    assert row.listed_late_at is None
    assert not row.checkpoint_identifier
    assert not _late_events(guard)
    sim.clear_faults()
    assert checkpoints_listed_late_sweep().recorded == 1


def test_a_guard_past_the_horizon_is_not_looked_at(
    sim: Any, sites: Any, agent: Any, inline_tasks: InlineTasks, settings: Any
) -> None:
    guard = _timed_out_guard(sim, agent, "chg-late-3", tasks=inline_tasks)
    _wait_listed_on_zvm(sim, guard)
    TaggedCheckpoint.objects.filter(guard=guard).update(insert_started_at=guard.requested_at.replace(year=2020))

    report = checkpoints_listed_late_sweep()

    assert report.vpgs_listed == 0
    assert report.recorded == 0


def test_a_recovery_over_mcp_finds_the_late_checkpoint_itself(
    sim: Any, sites: Any, agent: Any, worker: Any, mcp_server: Any, mcp_client: Any
) -> None:
    """No sweep ran: resolving the change id looks once more and binds the late checkpoint."""
    caller, token = make_agent_token()
    guard = _timed_out_guard(sim, agent, "chg-late-4")
    listed = _wait_listed_on_zvm(sim, guard)

    async def ask() -> Any:
        async with mcp_client(token) as client:
            return await client.call_tool(
                "zerto_recover_file", {"vm": "db01", "path": "/etc/my.cnf", "reason": "undo", "change_id": "chg-late-4"}
            )

    result = run(ask())

    assert not result.is_error, result.content
    checkpoint = result.structured_content["checkpoint"]
    assert checkpoint["identifier"] == listed["CheckpointIdentifier"]
    assert checkpoint["listed_late_at"]
    assert RecoveryRequest.objects.get().agent_name == caller.name
    assert len(_late_events(guard)) == 1


def test_admin_and_rest_show_the_late_listing(
    sim: Any, sites: Any, agent: Any, inline_tasks: InlineTasks, admin_user: Any
) -> None:
    guard = _timed_out_guard(sim, agent, "chg-late-5", tasks=inline_tasks)
    _wait_listed_on_zvm(sim, guard)
    checkpoints_listed_late_sweep()
    client = Client()
    client.force_login(admin_user)

    detail = client.get(f"/api/guards/{guard.pk}/").json()

    assert detail["status"] == "failed"
    assert detail["vpgs"][0]["status"] == "timed_out"
    assert detail["vpgs"][0]["listed_late_at"]
    page = client.get(f"/admin/rewind/changeguard/{guard.pk}/change/")
    assert page.status_code == 200
    assert "Listed late at" in page.content.decode()
