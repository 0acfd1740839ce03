"""The FLR runner end to end: its task run in this process (the queue is not under test), the
simulator over HTTPS, real files."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from recoveries.models import FlrSession, RecoveryRequest
from recoveries.services import recovery_request_approve, recovery_request_create
from rewind.models import AuditEvent
from tests.helpers import wait_recovery_finished

pytestmark = pytest.mark.timeout(300)


def _request(agent: Any, vm: str, path: str, **kw: Any) -> RecoveryRequest:
    return recovery_request_create(agent=agent, vm=vm, path=path, reason="config broke", **kw)


def _live(sim: Any, slug: str) -> list[dict[str, Any]]:
    return [s for s in sim.sessions(slug) if s["status"] != "UnmountInProgress"]


def test_it_recovers_the_old_bytes_of_a_file_changed_after_the_checkpoint(
    inline_tasks, sim, sites, people, agent, tagged
) -> None:
    old = sim.read_file("web01", "/etc/nginx/nginx.conf")
    tagged("web01", "chg-nginx")
    sim.set_file("web01", "/etc/nginx/nginx.conf", text="broken by the agent\n")
    recovery = _request(agent, "web01", "/etc/nginx/nginx.conf", change_id="chg-nginx")
    assert recovery.status == RecoveryRequest.Status.PENDING
    assert recovery.vpg_name in ("vpg-web", "vpg-web-dr")

    recovery_request_approve(recovery_id=recovery.pk, user=people.approver)
    recovery = wait_recovery_finished(recovery, tasks=inline_tasks)

    assert recovery.status == RecoveryRequest.Status.SUCCEEDED, recovery.error
    data = Path(recovery.stored_path).read_bytes()
    assert data == old
    assert recovery.sha256 == hashlib.sha256(old).hexdigest()
    assert recovery.size == len(old)
    assert recovery.flr_path == "partition#2 Ext4/etc/nginx/nginx.conf"
    assert recovery.unmount_ok is True
    assert _live(sim, "site-b") == []
    session = FlrSession.objects.get(recovery=recovery)
    assert session.status == FlrSession.Status.ENDED
    assert session.session_id == recovery.unmount_session_id
    actions = set(
        AuditEvent.objects.filter(target_id__in=[str(recovery.pk), str(session.pk)]).values_list("action", flat=True)
    )
    assert {
        "recoveries.request.requested",
        "recoveries.request.approved",
        "recoveries.session.mounted",
        "recoveries.file.downloaded",
        "recoveries.session.unmounted",
        "recoveries.request.succeeded",
    } <= actions


def test_it_maps_a_separate_boot_partition(inline_tasks, sim, sites, people, agent, tagged) -> None:
    tagged("web01")
    recovery = _request(agent, "web01", "/boot/grub/grub.cfg")
    assert recovery.checkpoint_source == RecoveryRequest.CheckpointSource.LATEST_TAGGED
    recovery_request_approve(recovery_id=recovery.pk, user=people.approver)
    recovery = wait_recovery_finished(recovery, tasks=inline_tasks)
    assert recovery.status == RecoveryRequest.Status.SUCCEEDED, recovery.error
    assert recovery.flr_path == "partition#1 Ext4/grub/grub.cfg"
    assert Path(recovery.stored_path).read_bytes() == sim.read_file("web01", "/boot/grub/grub.cfg")


@pytest.mark.parametrize(
    ("path", "normalized", "flr_path"),
    [
        ("C:\\inetpub\\web.config", "C:/inetpub/web.config", "partition#2 NTFS/inetpub/web.config"),
        ("d:\\DATA\\report.csv", "D:/DATA/report.csv", "partition#3 NTFS/data/report.csv"),
    ],
)
def test_it_recovers_a_windows_path_skipping_system_reserved(
    inline_tasks, sim, sites, people, agent, tagged, path, normalized, flr_path
) -> None:
    old = sim.read_file("win01", path)
    tagged("win01")
    sim.set_file("win01", path, text="clobbered")
    recovery = _request(agent, "win01", path)
    assert recovery.normalized_path == normalized
    recovery_request_approve(recovery_id=recovery.pk, user=people.approver)
    recovery = wait_recovery_finished(recovery, tasks=inline_tasks)
    assert recovery.status == RecoveryRequest.Status.SUCCEEDED, recovery.error
    assert recovery.flr_path == flr_path
    assert Path(recovery.stored_path).read_bytes() == old


@pytest.mark.parametrize(
    ("path", "message"),
    [("/etc", "not a file"), ("/etc/nope.conf", "does not exist")],
)
def test_it_fails_clearly_for_a_directory_or_an_absent_file(
    inline_tasks, sim, sites, people, agent, tagged, path, message
) -> None:
    tagged("db01")
    recovery = _request(agent, "db01", path)
    recovery_request_approve(recovery_id=recovery.pk, user=people.approver)
    recovery = wait_recovery_finished(recovery, tasks=inline_tasks)
    assert recovery.status == RecoveryRequest.Status.FAILED
    assert message in recovery.error
    assert recovery.unmount_ok is True
    assert _live(sim, "site-b") == []


def test_it_reports_a_mount_failure(inline_tasks, sim, sites, people, agent, tagged) -> None:
    tagged("db01")
    sim.add_fault("mount_fail", site="site-b")
    recovery = _request(agent, "db01", "/etc/my.cnf")
    recovery_request_approve(recovery_id=recovery.pk, user=people.approver)
    recovery = wait_recovery_finished(recovery, tasks=inline_tasks)
    assert recovery.status == RecoveryRequest.Status.FAILED
    assert "MountFailed" in recovery.error
    assert _live(sim, "site-b") == []


def test_it_fails_when_a_resync_wiped_the_checkpoint(inline_tasks, sim, sites, people, agent, tagged) -> None:
    tagged("db01")
    recovery = _request(agent, "db01", "/etc/my.cnf")
    sim.resync("vpg-db")
    recovery_request_approve(recovery_id=recovery.pk, user=people.approver)
    recovery = wait_recovery_finished(recovery, tasks=inline_tasks)
    assert recovery.status == RecoveryRequest.Status.FAILED
    assert "no longer exists" in recovery.error
    assert not FlrSession.objects.filter(recovery=recovery).exists()


def test_a_mounted_partition_hides_what_root_has_under_its_mount_point(
    inline_tasks, sim, sites, people, agent, tagged
) -> None:
    sim.set_file("web01", "/boot/extra.cfg", text="on the boot partition")
    sim.set_file("web01", "partition#2 Ext4/boot/extra.cfg", text="hidden under the mount point")
    tagged("web01")
    recovery = _request(agent, "web01", "/boot/extra.cfg")
    recovery_request_approve(recovery_id=recovery.pk, user=people.approver)
    recovery = wait_recovery_finished(recovery, tasks=inline_tasks)
    assert recovery.status == RecoveryRequest.Status.SUCCEEDED, recovery.error
    # /etc/fstab mounts the boot partition on /boot, so the guest sees its copy.
    assert recovery.flr_path == "partition#1 Ext4/extra.cfg"
    assert Path(recovery.stored_path).read_bytes() == b"on the boot partition"


def test_a_path_found_on_two_partitions_without_fstab_is_refused_naming_both(
    inline_tasks, sim, sites, people, agent, tagged
) -> None:
    sim.delete_file("web01", "/etc/fstab")
    sim.set_file("web01", "/boot/extra.cfg", text="on the boot partition")
    sim.set_file("web01", "partition#2 Ext4/boot/extra.cfg", text="hidden under the mount point")
    tagged("web01")
    recovery = _request(agent, "web01", "/boot/extra.cfg")
    recovery_request_approve(recovery_id=recovery.pk, user=people.approver)
    recovery = wait_recovery_finished(recovery, tasks=inline_tasks)
    assert recovery.status == RecoveryRequest.Status.FAILED
    assert "ambiguous" in recovery.error
    assert "partition#1 Ext4/extra.cfg" in recovery.error
    assert "partition#2 Ext4/boot/extra.cfg" in recovery.error
    assert _live(sim, "site-b") == []
