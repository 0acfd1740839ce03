"""Guard and recovery end to end against every simulator variant (zvmsim/variants.py).

The simulator and the client were written together, so they agree on everything the fact
sheet leaves UNKNOWN; a real ZVM may not. Each variant makes one such behaviour go the other
plausible way ("hostile" makes all of them go that way at once), and the same flows must
hold: a guard is ok, the right file comes back byte for byte from the right partition, the
mount is gone afterwards, and a missing file or a folder is refused clearly.

The guard's poll rounds and the recovery's run are the worker's own task functions, run in the
test's process (``inline_tasks``): the queue is not what these tests are about.

Run one variant: ``pytest tests/recoveries/test_variant_matrix.py -k browse-400``. The quick run
(``make quicktest``) runs ``default`` and ``hostile`` only (tests/sizes.py); CI runs all twenty.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from recoveries.models import RecoveryRequest
from recoveries.services import recovery_request_approve, recovery_request_create
from rewind.checkpoints.services import guard_create
from rewind.models import ChangeGuard
from tests.fixtures import InlineTasks
from tests.helpers import wait_recovery_finished
from tests.sizes import sweep
from zvmsim.variants import PRESETS

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(params=sweep(list(PRESETS), ["default", "hostile"]))
def variant(request: pytest.FixtureRequest, sim: Any) -> str:
    """Every simulated ZVM behaves as the named preset for the whole test."""
    sim.set_variants(preset=request.param)
    return str(request.param)


def _guarded(tasks: InlineTasks, agent: Any, vm: str, change_id: str) -> ChangeGuard:
    outcome = guard_create(
        agent_name=agent.name, agent_id=agent.pk, vm=vm, action="edit config", change_id=change_id, timeout_s=120
    )
    assert outcome.guard is not None, outcome.refusal
    guard_id = outcome.guard.pk

    def finished() -> ChangeGuard | None:
        guard = ChangeGuard.objects.get(pk=guard_id)
        return guard if guard.status in (ChangeGuard.Status.OK, ChangeGuard.Status.FAILED) else None

    guard = tasks.wait_for(finished, 150)
    assert guard.status == ChangeGuard.Status.OK, [(r.vpg_name, r.status, r.error) for r in guard.vpgs.all()]
    return guard


def _recovered(tasks: InlineTasks, agent: Any, people: Any, vm: str, path: str, change_id: str) -> RecoveryRequest:
    recovery = recovery_request_create(agent=agent, vm=vm, path=path, reason="the change broke it", change_id=change_id)
    recovery_request_approve(recovery_id=recovery.pk, user=people.approver)
    return wait_recovery_finished(recovery, tasks=tasks)


def _no_live_mounts(sim: Any) -> list[dict[str, Any]]:
    return [
        s
        for slug in ("site-a", "site-b", "site-c")
        for s in sim.sessions(slug)
        if s["status"] in ("MountInProgress", "MountCompletedSuccessfully")
    ]


def _assert_recovered(recovery: RecoveryRequest, flr_path: str, expected: bytes) -> None:
    assert recovery.status == RecoveryRequest.Status.SUCCEEDED, recovery.error
    assert recovery.flr_path == flr_path
    assert Path(recovery.stored_path).read_bytes() == expected
    assert recovery.unmount_ok is True, recovery.unmount_warning


def test_linux_files_come_back_from_root_and_from_a_separate_boot_partition(
    variant, inline_tasks, sim, sites, people, agent
) -> None:
    nginx, grub = sim.read_file("web01", "/etc/nginx/nginx.conf"), sim.read_file("web01", "/boot/grub/grub.cfg")
    _guarded(inline_tasks, agent, "web01", "chg-linux")
    sim.set_file("web01", "/etc/nginx/nginx.conf", text="broken by the change\n")
    sim.set_file("web01", "/boot/grub/grub.cfg", text="broken too\n")

    _assert_recovered(
        _recovered(inline_tasks, agent, people, "web01", "/etc/nginx/nginx.conf", "chg-linux"),
        "partition#2 Ext4/etc/nginx/nginx.conf",
        nginx,
    )
    _assert_recovered(
        _recovered(inline_tasks, agent, people, "web01", "/boot/grub/grub.cfg", "chg-linux"),
        "partition#1 Ext4/grub/grub.cfg",
        grub,
    )
    assert _no_live_mounts(sim) == []


def test_windows_paths_in_any_case_on_c_and_d(variant, inline_tasks, sim, sites, people, agent) -> None:
    config, report = (
        sim.read_file("win01", "C:\\inetpub\\wwwroot\\Web.config"),
        sim.read_file("win01", "D:\\data\\report.csv"),
    )
    _guarded(inline_tasks, agent, "win01", "chg-win")
    sim.set_file("win01", "C:\\inetpub\\wwwroot\\Web.config", text="clobbered")
    sim.set_file("win01", "D:\\data\\report.csv", text="clobbered")

    _assert_recovered(
        _recovered(inline_tasks, agent, people, "win01", "c:\\INETPUB\\WWWROOT\\Web.Config", "chg-win"),
        "partition#2 NTFS/inetpub/wwwroot/Web.config",
        config,
    )
    _assert_recovered(
        _recovered(inline_tasks, agent, people, "win01", "D:\\DATA\\Report.CSV", "chg-win"),
        "partition#3 NTFS/data/report.csv",
        report,
    )
    assert _no_live_mounts(sim) == []


def test_a_missing_file_or_a_folder_is_refused_clearly(variant, inline_tasks, sim, sites, people, agent) -> None:
    _guarded(inline_tasks, agent, "web01", "chg-bad")
    for path, message in (
        ("/etc/nginx/missing.conf", "does not exist"),
        ("/etc/nginx", "not a file"),
        ("/boot/grub/nope.cfg", "does not exist"),
    ):
        recovery = _recovered(inline_tasks, agent, people, "web01", path, "chg-bad")
        assert recovery.status == RecoveryRequest.Status.FAILED, path
        assert message in recovery.error, recovery.error
        assert "HTTP" not in recovery.error  # an error status was not passed off as the answer
        assert recovery.unmount_ok is True
    assert _no_live_mounts(sim) == []
