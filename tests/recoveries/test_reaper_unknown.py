"""A mount whose answer was a 500 leaves a row without a session id: the reaper ends it, safely.

Only a session list read successfully, past the settle time, ends the row; a failed listing
ends nothing; a session that turns up late is found and unmounted instead; several fitting
sessions are left alone.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from recoveries.models import FlrSession, RecoveryRequest
from recoveries.reaper import _settle_time, recoveries_reap
from recoveries.services import recovery_request_approve, recovery_request_create
from rewind.models import AuditEvent
from rewind.sites import site_client
from tests.fixtures import InlineTasks
from tests.helpers import wait_recovery_finished

pytestmark = pytest.mark.timeout(300)
S = FlrSession.Status


def _failed_mount(tasks: InlineTasks, sim: Any, agent: Any, people: Any, tagged: Any) -> FlrSession:
    """A recovery whose mount was answered 500, run by the runner's task in this process."""
    tagged("db01")
    sim.add_fault("http_error", site="site-b", status=500, path_regex=r"/v1/flrs$", method="POST", count=1)
    recovery = recovery_request_create(agent=agent, vm="db01", path="/etc/my.cnf", reason="undo")
    recovery_request_approve(recovery_id=recovery.pk, user=people.approver)
    recovery = wait_recovery_finished(recovery, tasks=tasks)
    assert recovery.status == RecoveryRequest.Status.FAILED
    row = FlrSession.objects.get(recovery=recovery)
    assert row.status == S.UNKNOWN
    assert row.session_id == ""
    assert "500" in row.last_error
    return row


def test_a_mount_answered_500_that_started_nothing_says_so(inline_tasks, sim, sites, people, agent, tagged) -> None:
    """It said "the reaper will find and unmount the session" when the ZVM listed no session at all."""
    row = _failed_mount(inline_tasks, sim, agent, people, tagged)
    recovery = RecoveryRequest.objects.get(sessions=row)
    assert "lists no session that this mount started: nothing is mounted" in recovery.error
    assert "will find and unmount the session" not in recovery.error
    assert (recovery.unmount_ok, recovery.unmount_session_id) == (True, "")
    assert recovery.unmount_warning.startswith("nothing was mounted; should the ZVM still start one")


def _later() -> Any:
    return timezone.now() + _settle_time() + timedelta(seconds=1)


def _ended_events(row: FlrSession) -> int:
    return AuditEvent.objects.filter(action="recoveries.session.vanished", target_id=str(row.pk)).count()


def test_a_mount_answered_500_is_ended_once_settled_and_the_zvm_lists_nothing(
    inline_tasks, sim, sites, people, agent, tagged
) -> None:
    row = _failed_mount(inline_tasks, sim, agent, people, tagged)

    # Right after the failure the ZVM may still be creating the session: nothing is ended.
    early = recoveries_reap()
    assert early.unknown_ended == 0
    row.refresh_from_db()
    assert row.status == S.UNKNOWN

    report = recoveries_reap(now=_later())

    assert report.unknown_ended == 1
    assert not report.site_errors
    row.refresh_from_db()
    assert row.status == S.ENDED
    assert row.ended_at is not None
    assert "no session appeared" in row.end_reason
    assert _ended_events(row) == 1
    event = AuditEvent.objects.get(action="recoveries.session.vanished", target_id=str(row.pk))
    assert event.data["session_id"] == "unknown"
    assert "500" in event.data["last_error"]
    assert recoveries_reap(now=_later()).unknown_ended == 0  # once


def test_a_failed_session_listing_is_never_read_as_absent(inline_tasks, sim, sites, people, agent, tagged) -> None:
    row = _failed_mount(inline_tasks, sim, agent, people, tagged)
    sim.add_fault("http_error", site="site-b", status=503, path_regex=r"/v1/flrs$", method="GET")

    report = recoveries_reap(now=_later())

    assert report.unknown_ended == 0
    assert "Site B" in report.site_errors
    row.refresh_from_db()
    assert row.status == S.UNKNOWN
    assert _ended_events(row) == 0
    sim.clear_faults()
    assert recoveries_reap(now=_later()).unknown_ended == 1


def test_a_session_listed_late_is_found_and_unmounted_not_ended_unseen(
    inline_tasks, sim, sites, people, agent, tagged
) -> None:
    """The ZVM answered 500 but created the session afterwards: the sweep adopts and unmounts it."""
    row = _failed_mount(inline_tasks, sim, agent, people, tagged)
    late = site_client(sites["site-b"]).flr_mount(
        vpg_id=row.vpg_identifier, vm_id=row.vm_identifier, checkpoint_id=row.checkpoint_identifier
    )

    report = recoveries_reap(now=_later())

    assert report.found_unknown == 1
    assert report.unmounted == 1
    assert report.unknown_ended == 0
    row.refresh_from_db()
    assert row.session_id == late
    assert _ended_events(row) == 0
    live = {s["session_id"] for s in sim.sessions("site-b") if s["status"] != "UnmountInProgress"}
    assert late not in live


def test_several_fitting_sessions_are_left_alone_and_the_row_is_not_ended(
    inline_tasks, sim, sites, people, agent, tagged
) -> None:
    row = _failed_mount(inline_tasks, sim, agent, people, tagged)
    one = sim.open_foreign_session("site-b", "db01", "vpg-db", row.checkpoint_identifier)
    two = sim.open_foreign_session("site-b", "db01", "vpg-db", row.checkpoint_identifier)

    report = recoveries_reap(now=_later())

    assert report.unknown_ended == 0
    assert report.unmounted == 0
    assert report.found_unknown == 0
    row.refresh_from_db()
    assert row.status == S.UNKNOWN
    assert row.session_id == ""
    assert {one, two} <= {s["session_id"] for s in sim.sessions("site-b")}
