"""A write-back whose Celery worker dies mid-write ends truthfully: the beat's sweep finds it silent
in ``writing`` past its bound and, never writing again, reads the file back: the checkpoint's bytes
(verified), the old ones (not written), anything else or nothing (failed, naming the undo).

The deaths are real: a real worker process writes through the faulty guest shell's
``write_stalling``, which hangs before or after writing, and the test SIGKILLs the worker there."""

from __future__ import annotations

import hashlib
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from recoveries.models import RecoveryRequest, RestoreState
from recoveries.restore.services import diff_token, recovery_restore_confirm
from recoveries.restore.sweep import WRITE_STALLED_AFTER, restores_end_dead_writes, restores_resume_stalled
from recoveries.services import recovery_request_approve, recovery_request_create
from rewind.audit.models import AuditEvent
from rewind.models import Agent
from rewind.notifications.models import NotificationDelivery, NotificationKind
from tests.fixtures import wait_until
from tests.gateway.support import GuestShellHttp, guest_shell_file_tools
from tests.helpers import WorkerProcess

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("fresh_lookups")]
State = RestoreState
Status = RecoveryRequest.Status
DIR = "/etc/app"
FOLDER = "/srv/app"
# Past every bound: the upstream's calls (300 s each by default) and WRITE_STALLED_AFTER.
LONG_AFTER = timedelta(hours=2)
FINAL = (State.VERIFIED, State.DIFFERS, State.NOT_WRITTEN, State.FAILED)


def _tools(shell: GuestShellHttp, writer: str = "write_stalling") -> None:
    guest_shell_file_tools(shell, writer_tool=writer)


def _ask(agent: Agent, path: str, **kw: Any) -> RecoveryRequest:
    return recovery_request_create(
        agent=agent, vm="web01", path=path, reason="my edit broke it", change_id="chg-1", restore=True, **kw
    )


def _state(recovery: RecoveryRequest, *states: str, tasks: Any = None) -> RecoveryRequest:
    def reached() -> bool:
        recovery.refresh_from_db()
        return recovery.restore_state in states

    if tasks is not None:
        tasks.wait_for(reached, timeout=120)
    else:
        wait_until(reached, 120, what=f"recovery {recovery.pk} in {states}")
    return recovery


def _confirm(people: Any, recovery: RecoveryRequest) -> None:
    recovery_restore_confirm(recovery_id=recovery.pk, user=people.approver, seen=diff_token(recovery))


def _broken_and_confirmed(sim: Any, people: Any, agent: Agent, tagged: Any, faulty: Any, path: str) -> RecoveryRequest:
    """``path`` good at the checkpoint and broken since; asked back, approved, its write-back confirmed."""
    _tools(faulty)
    sim.set_file("web01", path, text="good = 1\n")
    tagged()
    sim.set_file("web01", path, text="broken = 1\n")
    recovery = _ask(agent, path)
    recovery_request_approve(recovery_id=recovery.pk, user=people.approver)
    recovery = _state(recovery, State.AWAITING)
    _confirm(people, recovery)
    return recovery


def _writes(shell: GuestShellHttp) -> list[str]:
    return [call["arguments"]["path"] for call in shell.calls() if call["tool"] == "write_stalling"]


def _kill_mid_write(worker: WorkerProcess, recovery: RecoveryRequest) -> RecoveryRequest:
    """SIGKILL the worker (its pool children too) while its write hangs; the write-back stays ``writing``."""
    worker.kill()
    recovery.refresh_from_db()
    assert (recovery.status, recovery.restore_state) == (Status.RESTORING, State.WRITING)
    return recovery


def _sweep_after_death(recovery: RecoveryRequest) -> RecoveryRequest:
    """The beat's sweep: nothing ends within the bound; past it, the write-back is read back and ended once."""
    assert recovery.restore_step_at is not None
    assert restores_resume_stalled() == 0
    # Beyond WRITE_STALLED_AFTER but within the upstream's own bound for one file (its calls may take 300 s).
    assert restores_end_dead_writes(now=recovery.restore_step_at + WRITE_STALLED_AFTER + timedelta(seconds=1)) == 0
    assert restores_resume_stalled(now=timezone.now() + LONG_AFTER) == 1
    assert restores_resume_stalled(now=timezone.now() + 2 * LONG_AFTER) == 0  # ended once
    recovery.refresh_from_db()
    assert recovery.status == Status.SUCCEEDED
    finished = AuditEvent.objects.filter(action="recoveries.restore.finished", target_id=str(recovery.pk))
    assert finished.count() == 1
    assert finished.get().data["restored"] == recovery.restore_state
    return recovery


# -- a real worker, killed mid-write -------------------------------------------------------------------


def test_a_worker_killed_after_the_write_reached_the_guest_ends_verified(
    worker, sim, sites, people, agent, tagged, faulty, receiver, settings
) -> None:
    settings.REWIND_NOTIFY_URLS = [receiver.url("/all")]
    path = f"{DIR}/stall-after-app.conf"
    recovery = _broken_and_confirmed(sim, people, agent, tagged, faulty, path)
    wait_until(lambda: sim.read_file("web01", path) == b"good = 1\n", 120, what="the write in the guest")

    recovery = _sweep_after_death(_kill_mid_write(worker, recovery))

    assert recovery.restore_state == State.VERIFIED, recovery.restore_message
    assert "the worker died after writing, and the read-back matched" in recovery.restore_message
    assert recovery.written_sha256 == hashlib.sha256(b"good = 1\n").hexdigest()
    assert _writes(faulty) == [path]  # never written again
    told = NotificationDelivery.objects.get(kind=NotificationKind.RECOVERY_RESTORED, target_id=str(recovery.pk))
    assert "the worker died after writing" in told.body


def test_a_worker_killed_before_the_write_reached_the_guest_ends_not_written(
    worker, sim, sites, people, agent, tagged, faulty
) -> None:
    path = f"{DIR}/stall-before-app.conf"
    recovery = _broken_and_confirmed(sim, people, agent, tagged, faulty, path)
    wait_until(lambda: _writes(faulty) == [path], 120, what="the writer's call")

    recovery = _sweep_after_death(_kill_mid_write(worker, recovery))

    assert recovery.restore_state == State.NOT_WRITTEN, recovery.restore_message
    assert recovery.restore_message == (
        "not written: the worker died before the write reached the guest; the guest still holds the file as it was"
    )
    assert sim.read_file("web01", path) == b"broken = 1\n"
    assert _writes(faulty) == [path]


def test_a_folder_whose_worker_is_killed_mid_write_keeps_each_files_result(
    worker, sim, sites, people, agent, tagged, faulty
) -> None:
    # In manifest (name) order: a changed, b unchanged, stall-after-s changed (the worker dies in it),
    # t unchanged, u changed.
    good = {"a.conf": "a\n", "b.conf": "b\n", "stall-after-s.conf": "s\n", "t.conf": "t\n", "u.conf": "u\n"}
    for rel, text in good.items():
        sim.set_file("web01", f"{FOLDER}/{rel}", text=text)
    tagged()
    for rel in ("a.conf", "stall-after-s.conf", "u.conf"):
        sim.set_file("web01", f"{FOLDER}/{rel}", text="broken\n")
    _tools(faulty)
    recovery = _ask(agent, FOLDER, recursive=True)
    recovery_request_approve(recovery_id=recovery.pk, user=people.approver)
    recovery = _state(recovery, State.AWAITING)
    _confirm(people, recovery)
    under_way = f"{FOLDER}/stall-after-s.conf"
    wait_until(lambda: sim.read_file("web01", under_way) == b"s\n", 120, what="the write of stall-after-s.conf")

    recovery = _sweep_after_death(_kill_mid_write(worker, recovery))

    rows = {row["path"]: row for row in recovery.restore_files}
    assert {path: row["result"] for path, row in rows.items()} == {
        "a.conf": State.VERIFIED,
        "b.conf": "skipped",
        "stall-after-s.conf": State.VERIFIED,
        "t.conf": "skipped",
        "u.conf": State.NOT_WRITTEN,
    }
    assert rows["a.conf"]["message"] == "verified"  # resulted by the worker before it died
    assert "the worker died after writing" in rows["stall-after-s.conf"]["message"]
    assert rows["u.conf"]["message"] == "not written: the write-back's worker died before it"
    assert recovery.restore_state == State.FAILED  # partly written
    assert "died while writing stall-after-s.conf" in recovery.restore_message
    assert f'zerto_recover_file(change_id="restore-{recovery.pk}")' in recovery.restore_message
    assert sim.read_file("web01", f"{FOLDER}/u.conf") == b"broken\n"
    assert _writes(faulty) == [f"{FOLDER}/a.conf", under_way]


# -- each branch, the write's death staged in the database ----------------------------------------------


@pytest.mark.parametrize(
    ("guest_holds", "state", "said"),
    [
        ("good", State.VERIFIED, "verified: the worker died after writing, and the read-back matched"),
        ("broken", State.NOT_WRITTEN, "not written: the worker died before the write reached the guest"),
        ("other", State.FAILED, "neither the old file nor the checkpoint's; it may be partly written"),
        (None, State.FAILED, "could not be read back"),
    ],
)
def test_a_dead_write_is_ended_by_what_the_guest_holds(
    inline_tasks, sim, sites, people, agent, tagged, guestshell_http, receiver, settings, guest_holds, state, said
) -> None:
    settings.REWIND_NOTIFY_URLS = [receiver.url("/all")]
    path = f"{DIR}/app.conf"
    _tools(guestshell_http, writer="write_file")
    sim.set_file("web01", path, text="good\n")
    tagged()
    sim.set_file("web01", path, text="broken\n")
    recovery = _ask(agent, path)
    recovery_request_approve(recovery_id=recovery.pk, user=people.approver)
    recovery = _state(recovery, State.AWAITING, tasks=inline_tasks)
    # A worker took the write and died somewhere in it: what it left in the guest is staged here.
    started = timezone.now()
    RecoveryRequest.objects.filter(pk=recovery.pk).update(
        status=Status.RESTORING, restore_state=State.WRITING, restore_step_at=started
    )
    if guest_holds is None:
        sim.delete_file("web01", path)
    elif guest_holds != "broken":
        sim.set_file("web01", path, text=f"{guest_holds}\n")
    guestshell_http.clear()

    assert restores_end_dead_writes(now=started + LONG_AFTER) == 1
    assert restores_end_dead_writes(now=started + 2 * LONG_AFTER) == 0

    recovery.refresh_from_db()
    assert recovery.restore_state == state, recovery.restore_message
    assert said in recovery.restore_message
    undo = f'zerto_recover_file(change_id="restore-{recovery.pk}")'
    assert (undo in recovery.restore_message) == (state == State.FAILED)
    assert [call["tool"] for call in guestshell_http.calls()] == ["read_file"]  # read back, never written
    kind = NotificationKind.RECOVERY_RESTORED if state == State.VERIFIED else NotificationKind.RECOVERY_NOT_RESTORED
    assert NotificationDelivery.objects.filter(kind=kind, target_id=str(recovery.pk)).exists()


def test_a_sweep_that_finds_the_write_taken_by_another_reads_nothing_back(
    inline_tasks, sim, sites, people, agent, tagged, guestshell_http
) -> None:
    path = f"{DIR}/app.conf"
    _tools(guestshell_http, writer="write_file")
    sim.set_file("web01", path, text="good\n")
    tagged()
    recovery = _ask(agent, path)
    recovery_request_approve(recovery_id=recovery.pk, user=people.approver)
    recovery = _state(recovery, State.AWAITING, tasks=inline_tasks)
    started = timezone.now()
    RecoveryRequest.objects.filter(pk=recovery.pk).update(
        status=Status.RESTORING, restore_state=State.WRITING, restore_step_at=started
    )
    # Another sweep took it a moment ago (its stamp is fresh): this one leaves it alone.
    RecoveryRequest.objects.filter(pk=recovery.pk).update(restore_step_at=started + LONG_AFTER)
    guestshell_http.clear()

    assert restores_end_dead_writes(now=started + LONG_AFTER + timedelta(seconds=1)) == 0

    recovery.refresh_from_db()
    assert recovery.restore_state == State.WRITING
    assert guestshell_http.calls() == []
