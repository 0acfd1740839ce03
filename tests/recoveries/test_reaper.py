"""The reaper on its own: overlapping sweeps act once, vanished sessions end, the command runs it."""

from __future__ import annotations

import json
import threading
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command

from recoveries.models import FlrSession
from recoveries.reaper import recoveries_reap
from rewind.models import AuditEvent
from rewind.sites import site_client

pytestmark = [pytest.mark.timeout(300)]


def _mount_ours(sim: Any, sites: dict[str, Any], count: int) -> list[FlrSession]:
    """Sessions mounted through the client and recorded as ours, with no recovery left (reapable)."""
    info = sim.vm("db01")
    vpg = info["vpgs"][0]
    client = site_client(sites["site-b"])
    checkpoint = client.list_checkpoints(vpg["identifier"])[-1].identifier
    assert checkpoint is not None
    rows = []
    for _ in range(count):
        sid = client.flr_mount(vpg_id=vpg["identifier"], vm_id=info["identifier"], checkpoint_id=checkpoint)
        rows.append(
            FlrSession.objects.create(
                site=sites["site-b"],
                session_id=sid,
                vm_identifier=info["identifier"],
                vpg_identifier=vpg["identifier"],
                checkpoint_identifier=checkpoint,
                status=FlrSession.Status.MOUNTED,
            )
        )
    return rows


def test_overlapping_sweeps_unmount_each_session_once(transactional_db, sim, sites) -> None:
    rows = _mount_ours(sim, sites, 12)
    foreign = sim.open_foreign_session("site-b", "web01", "vpg-web")
    before = sim.calls("site-b").get("DELETE /v1/flrs/{session_id}", 0)
    reports: list[Any] = []
    threads = [threading.Thread(target=lambda: reports.append(recoveries_reap())) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert sum(r.unmounted for r in reports) == len(rows)
    assert sim.calls("site-b").get("DELETE /v1/flrs/{session_id}", 0) - before == len(rows)
    assert AuditEvent.objects.filter(action="recoveries.session.reaped").count() == len(rows)
    assert {s["session_id"] for s in sim.sessions("site-b") if s["status"] != "UnmountInProgress"} == {foreign}


def test_a_session_that_vanished_is_marked_ended(transactional_db, sim, sites) -> None:
    (row,) = _mount_ours(sim, sites, 1)
    sim.add_fault("restart", site="site-b")
    report = recoveries_reap()
    assert report.vanished == 1
    assert report.unmounted == 0
    row.refresh_from_db()
    assert row.status == FlrSession.Status.ENDED
    assert "vanished" in row.end_reason
    assert AuditEvent.objects.filter(action="recoveries.session.vanished", target_id=str(row.pk)).exists()


def test_manage_reap_runs_one_sweep_and_prints_it(transactional_db, sim, sites) -> None:
    _mount_ours(sim, sites, 2)
    out = StringIO()
    call_command("reap", stdout=out)
    assert json.loads(out.getvalue())["unmounted"] == 2


def test_a_site_that_cannot_be_asked_is_reported_and_its_sessions_kept(transactional_db, sim, sites) -> None:
    (row,) = _mount_ours(sim, sites, 1)
    sim.add_fault("http_error", site="site-b", status=503, path_regex=r"/v1/flrs$", method="GET", count=5)
    report = recoveries_reap()
    assert "Site B" in report.site_errors
    row.refresh_from_db()
    assert row.status == FlrSession.Status.MOUNTED
    sim.clear_faults()
    assert recoveries_reap().unmounted == 1
