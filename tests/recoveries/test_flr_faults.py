"""The runner and the reaper when the ZVM or the worker misbehave.

Where the worker is not what misbehaves, the run is the runner's task in this process
(``inline_tasks``); a ZVM restart in the middle of a run, a killed worker and the worker's memory
need the real worker.
"""

from __future__ import annotations

import hashlib
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.utils import timezone

from recoveries.models import FlrSession, RecoveryRequest
from recoveries.reaper import recoveries_reap
from recoveries.services import recovery_request_approve, recovery_request_create
from rewind.models import AuditEvent
from rewind.sites import site_client
from tests.helpers import wait_for_tasks, wait_recovery_finished

pytestmark = pytest.mark.timeout(600)


def _approved(agent: Any, people: Any, vm: str, path: str) -> RecoveryRequest:
    recovery = recovery_request_create(agent=agent, vm=vm, path=path, reason="undo")
    recovery_request_approve(recovery_id=recovery.pk, user=people.approver)
    return recovery


def _live_ids(sim: Any, slug: str) -> set[str]:
    return {s["session_id"] for s in sim.sessions(slug) if s["status"] != "UnmountInProgress"}


def test_a_failed_unmount_keeps_ok_with_a_warning_and_the_reaper_unmounts_later(
    inline_tasks, sim, sites, people, agent, tagged
) -> None:
    tagged("db01")
    sim.add_fault("unmount_fail", site="site-b", count=1)
    recovery = wait_recovery_finished(_approved(agent, people, "db01", "/etc/my.cnf"), tasks=inline_tasks)

    assert recovery.status == RecoveryRequest.Status.SUCCEEDED
    assert recovery.ok is True
    assert recovery.unmount_ok is False
    assert "unmount failed" in recovery.unmount_warning
    assert _live_ids(sim, "site-b") == {recovery.unmount_session_id}
    row = FlrSession.objects.get(recovery=recovery)
    assert row.status == FlrSession.Status.UNMOUNT_FAILED

    report = recoveries_reap()

    assert report.unmounted == 1
    assert _live_ids(sim, "site-b") == set()
    assert AuditEvent.objects.filter(action="recoveries.session.reaped", target_id=str(row.pk)).exists()
    wait_for_tasks(
        lambda: recoveries_reap().vanished == 1 or FlrSession.objects.get(pk=row.pk).status == FlrSession.Status.ENDED
    )
    assert FlrSession.objects.get(pk=row.pk).status == FlrSession.Status.ENDED


def test_an_unreadable_mount_answer_still_gets_the_session_unmounted(
    inline_tasks, sim, sites, people, agent, tagged
) -> None:
    tagged("db01")
    sim.add_fault("mount_unparseable", site="site-b", count=1)
    recovery = wait_recovery_finished(_approved(agent, people, "db01", "/etc/my.cnf"), tasks=inline_tasks)

    assert recovery.status == RecoveryRequest.Status.FAILED
    assert "unusable" in recovery.error
    row = FlrSession.objects.get(recovery=recovery)
    assert row.session_id
    assert row.status == FlrSession.Status.ENDED
    assert _live_ids(sim, "site-b") == set()


def test_the_reaper_finds_a_mount_whose_id_was_never_learned(
    transactional_db, sim, sites, people, agent, tagged
) -> None:
    """A runner that died between sending the mount and recording its id: the row has the
    snapshot but no id. The reaper finds the new session (same VM/VPG/checkpoint, not in the
    snapshot) and unmounts it, leaving the other operator's session on the same checkpoint alone."""
    tagged("db01")
    recovery = recovery_request_create(agent=agent, vm="db01", path="/etc/my.cnf", reason="undo")
    foreign = sim.open_foreign_session("site-b", "db01", "vpg-db", recovery.checkpoint_identifier)
    client = site_client(sites["site-b"])
    snapshot = [s.identifier for s in client.list_flr_sessions(vm_id=recovery.vm_identifier)]
    row = FlrSession.objects.create(
        site=sites["site-b"],
        recovery=recovery,
        vm_identifier=recovery.vm_identifier,
        vpg_identifier=recovery.vpg_identifier,
        checkpoint_identifier=recovery.checkpoint_identifier,
        snapshot_ids=snapshot,
        status=FlrSession.Status.UNKNOWN,
    )
    lost = client.flr_mount(
        vpg_id=recovery.vpg_identifier, vm_id=recovery.vm_identifier, checkpoint_id=recovery.checkpoint_identifier
    )
    assert _live_ids(sim, "site-b") == {foreign, lost}

    report = recoveries_reap()

    assert report.found_unknown == 1
    assert report.unmounted == 1
    row.refresh_from_db()
    assert row.session_id == lost
    assert _live_ids(sim, "site-b") == {foreign}
    assert AuditEvent.objects.filter(action="recoveries.session.reaped", target_id=str(row.pk)).exists()


def test_a_zvm_restart_mid_recovery_mounts_again(worker, sim, sites, people, agent, tagged) -> None:
    old = sim.read_file("db01", "/etc/my.cnf")
    tagged("db01")
    sim.set_file("db01", "/etc/my.cnf", text="[mysqld]\nbroken\n")
    sim.add_fault("mount_delay", site="site-b", seconds=30, count=1)
    recovery = _approved(agent, people, "db01", "/etc/my.cnf")
    wait_for_tasks(lambda: FlrSession.objects.filter(recovery=recovery).exclude(session_id="").exists(), 60)
    sim.add_fault("restart", site="site-b")

    recovery = wait_recovery_finished(recovery)

    assert recovery.status == RecoveryRequest.Status.SUCCEEDED, recovery.error
    assert Path(recovery.stored_path).read_bytes() == old
    first, second = FlrSession.objects.filter(recovery=recovery).order_by("attempt")
    assert first.status == FlrSession.Status.ENDED
    assert "dropped" in first.end_reason
    assert second.status == FlrSession.Status.ENDED
    assert _live_ids(sim, "site-b") == set()


def test_a_worker_killed_after_the_mount_leaves_it_to_the_reaper(worker, sim, sites, people, agent, tagged) -> None:
    tagged("db01")
    sim.add_fault("mount_delay", site="site-b", seconds=600, count=1)
    recovery = _approved(agent, people, "db01", "/etc/my.cnf")
    row = wait_for_tasks(lambda: FlrSession.objects.filter(recovery=recovery).exclude(session_id="").first(), 60)
    worker.kill()
    worker.start()
    assert _live_ids(sim, "site-b") == {row.session_id}
    recovery.refresh_from_db()
    assert recovery.status == RecoveryRequest.Status.RUNNING

    # Nothing is reaped while the run is within its time limit...
    assert recoveries_reap().unmounted == 0
    # ...and once it is past it, the run is failed and the mount goes.
    report = recoveries_reap(now=timezone.now() + timedelta(seconds=settings.REWIND_FLR_TIME_LIMIT_S + 1))

    assert report.overdue_recoveries == 1
    assert report.unmounted == 1
    recovery.refresh_from_db()
    assert recovery.status == RecoveryRequest.Status.FAILED
    assert "time limit" in recovery.error
    assert _live_ids(sim, "site-b") == set()
    # A redelivered run finds the request no longer approved and mounts nothing.
    from recoveries.runner import recovery_run

    assert recovery_run(recovery_id=recovery.pk, request_id="redelivered-1") == RecoveryRequest.Status.FAILED
    assert FlrSession.objects.filter(recovery=recovery).count() == 1


def test_the_reaper_never_touches_another_operators_session(inline_tasks, sim, sites, people, agent, tagged) -> None:
    tagged("db01")
    foreign = sim.open_foreign_session("site-b", "db01", "vpg-db")
    recovery = wait_recovery_finished(_approved(agent, people, "db01", "/etc/my.cnf"), tasks=inline_tasks)
    assert recovery.status == RecoveryRequest.Status.SUCCEEDED
    recoveries_reap(now=timezone.now() + timedelta(days=1))
    assert _live_ids(sim, "site-b") == {foreign}


def test_a_256_mib_file_is_recovered_in_bounded_memory(worker, sim, sites, people, agent, tagged) -> None:
    size = 256 * 1024 * 1024
    sim.set_file("db01", "/var/lib/big.bin", size=size, seed=7)
    digest = hashlib.sha256()
    resp = sim.http.get(f"{sim.url}/_sim/vms/db01/files", params={"path": "/var/lib/big.bin"}, stream=True, timeout=300)
    for chunk in resp.iter_content(1 << 20):
        digest.update(chunk)
    tagged("db01")
    sim.set_file("db01", "/var/lib/big.bin", text="truncated")

    recovery = wait_recovery_finished(_approved(agent, people, "db01", "/var/lib/big.bin"), timeout=500)

    assert recovery.status == RecoveryRequest.Status.SUCCEEDED, recovery.error
    assert recovery.size == size
    assert recovery.sha256 == digest.hexdigest()
    assert Path(recovery.stored_path).stat().st_size == size
    peak_mib = worker.proc.children_peak_rss_kib() / 1024  # each pool process's own peak
    print(f"worker peak RSS {peak_mib:.0f} MiB for a {size >> 20} MiB file")
    assert 0 < peak_mib < 200  # the file is never held whole in memory
    Path(recovery.stored_path).unlink()


def test_a_recovered_files_folder_that_cannot_take_a_file_fails_the_run_before_any_mount(
    inline_tasks: Any, sim: Any, sites: Any, people: Any, agent: Any, tagged: Any, tmp_path: Path, settings: Any
) -> None:
    # A file where the folder should be: no process can write under it, root included. A full or
    # read-only folder is the production-shape test's (tests/recoveries/test_storage_full.py).
    blocked = tmp_path / "recovered"
    blocked.write_text("not a folder")
    settings.REWIND_STORAGE_DIR = str(blocked)
    tagged("db01")
    recovery = wait_recovery_finished(_approved(agent, people, "db01", "/etc/my.cnf"), tasks=inline_tasks)
    assert recovery.status == RecoveryRequest.Status.FAILED
    assert recovery.error.startswith("the recovered-files folder (REWIND_STORAGE_DIR) could not take the file: ")
    assert "nothing was mounted" in recovery.error
    assert str(blocked) not in recovery.error
    assert not FlrSession.objects.filter(recovery=recovery).exists()
    assert sim.sessions("site-b") == []
