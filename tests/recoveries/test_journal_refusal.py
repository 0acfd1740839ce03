"""A recovery of a checkpoint that has left its VPG's journal: refused at request time naming when it
left, checked again at run time, and never refused on an estimate alone.

Hours pass at once for the simulated ZVMs (``sim.advance_clock``) and for this process
(``time_machine``), so both agree on the time.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.utils import timezone

from recoveries.models import RecoveryRequest
from recoveries.runner import recovery_run
from recoveries.services import recovery_request_approve, recovery_request_create
from rewind.checkpoints.retention import retention_refresh_sweep
from rewind.lib.errors import ApplicationError
from rewind.models import AuditEvent, TaggedCheckpoint

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(300)]
HOUR = 3600.0


@contextmanager
def hours_later(sim: Any, hours: float) -> Iterator[None]:
    sim.advance_clock(hours * HOUR)
    with time_machine.travel(timezone.now() + timedelta(hours=hours), tick=True):
        yield


def _ask(agent: Any, change_id: str, vm: str = "db01", path: str = "/etc/my.cnf") -> RecoveryRequest:
    return recovery_request_create(agent=agent, vm=vm, path=path, reason="the change broke it", change_id=change_id)


def test_a_checkpoint_that_left_the_journal_is_refused_naming_when(sim, sites, agent, tagged) -> None:
    guard = tagged("db01", "chg-old")
    sim.set_journal_history("vpg-db", 60)
    retention_refresh_sweep()
    row = guard.vpgs.get()
    assert row.leaves_journal_at is not None
    left_at = f"{row.leaves_journal_at:%Y-%m-%d %H:%M} UTC"
    before = AuditEvent.objects.exclude(action="guard.checkpoint.left_journal").count()
    with hours_later(sim, 2):
        # The last estimate says it left; the ZVM, asked once more now, confirms it.
        with pytest.raises(ApplicationError) as refused:
            _ask(agent, "chg-old")
    message = refused.value.message
    assert "change 'chg-old' for VM db01 can no longer be recovered" in message
    assert f"left the journal of VPG vpg-db at about {left_at}" in message
    assert "Nothing was requested" in message
    assert RecoveryRequest.objects.count() == 0
    assert AuditEvent.objects.exclude(action="guard.checkpoint.left_journal").count() == before
    row.refresh_from_db()
    assert row.left_journal_seen_at is not None
    # Seen gone, the next request is refused from the record alone (no ZVM asked about it).
    calls = sim.calls("site-a").get("GET /v1/vpgs/{vpg_id}", 0)
    with pytest.raises(ApplicationError, match="left the journal of VPG vpg-db"):
        recovery_request_create(agent=agent, vm="db01", path="/etc/my.cnf", reason="x")
    assert sim.calls("site-a").get("GET /v1/vpgs/{vpg_id}", 0) == calls


def test_an_estimate_that_passed_while_the_zvm_still_lists_the_checkpoint_refuses_nothing(
    sim, sites, agent, tagged
) -> None:
    guard = tagged("db01", "chg-stale")
    # A stale estimate (the journal grew since, or the figures were early): it is asked about again.
    TaggedCheckpoint.objects.filter(guard=guard).update(leaves_journal_at=timezone.now() - timedelta(minutes=5))
    recovery = _ask(agent, "chg-stale")
    assert recovery.status == RecoveryRequest.Status.PENDING
    row = guard.vpgs.get()
    assert row.left_journal_seen_at is None
    assert row.leaves_journal_at is not None
    assert row.leaves_journal_at > timezone.now() + timedelta(hours=23)


def test_a_zvm_that_cannot_be_asked_refuses_nothing(sim, sites, agent, tagged) -> None:
    guard = tagged("db01", "chg-down")
    TaggedCheckpoint.objects.filter(guard=guard).update(leaves_journal_at=timezone.now() - timedelta(minutes=5))
    sim.add_fault("http_error", site="site-a", status=503, path_regex=r"/v1/vpgs/[^/]+$", count=10)
    recovery = _ask(agent, "chg-down")
    assert recovery.status == RecoveryRequest.Status.PENDING


def test_a_vpg_whose_journal_still_holds_the_change_is_chosen(sim, sites, agent, tagged) -> None:
    guard = tagged("app01", "chg-multi")
    sim.set_journal_history("vpg-app-1", 60)  # the first choice by name keeps only an hour
    retention_refresh_sweep()
    with hours_later(sim, 2):
        recovery = _ask(agent, "chg-multi", vm="app01", path="/etc/app/app.conf")
    assert recovery.vpg_name == "vpg-app-2"
    assert guard.vpgs.get(vpg_name="vpg-app-1").left_journal_seen_at is not None


@pytest.mark.parametrize("preset", ["default", "aged-mount-fails", "history-missing"])
def test_the_run_checks_again_and_says_the_checkpoint_left_the_journal(
    sim, sites, agent, people, tagged, preset: str
) -> None:
    sim.set_variants(preset=preset)
    if preset == "history-missing":
        sim.set_auto_checkpoints(0, "vpg-db")  # so that its journal is empty two hours later
    tagged("db01", "chg-slow")
    sim.set_journal_history("vpg-db", 60)
    recovery = _ask(agent, "chg-slow")
    recovery_request_approve(recovery_id=recovery.pk, user=people.approver)
    with hours_later(sim, 2):  # the approval came, then nobody ran it for two hours
        assert recovery_run(recovery_id=recovery.pk, request_id="run-late") == RecoveryRequest.Status.FAILED
    recovery.refresh_from_db()
    assert f"checkpoint {recovery.checkpoint_identifier} of VPG vpg-db" in recovery.error
    if preset == "history-missing":
        # Neither a history nor an earliest checkpoint (the simulator's journal is empty by
        # now): nothing says why it is gone, only that it is.
        assert "no longer exists on Site B" in recovery.error
        assert "drops those older than its history" in recovery.error
    else:
        assert "has left the journal on Site B" in recovery.error
        assert "no file can be recovered from it any more" in recovery.error
    assert not [s for s in sim.sessions("site-b") if s["status"] == "MountCompletedSuccessfully"]


@pytest.mark.parametrize(("preset", "zvm_said"), [("default", "refused"), ("aged-mount-fails", "MountFailed")])
def test_a_mount_refused_or_failed_because_the_checkpoint_just_left_says_so(
    sim, sites, agent, people, tagged, monkeypatch, preset: str, zvm_said: str
) -> None:
    """The checkpoint leaves between the run's check and its mount: the mount's failure is explained."""
    import recoveries.runner

    sim.set_variants(preset=preset)
    tagged("db01", "chg-race")
    sim.set_journal_history("vpg-db", 60)
    recovery = _ask(agent, "chg-race")
    recovery_request_approve(recovery_id=recovery.pk, user=people.approver)
    monkeypatch.setattr(recoveries.runner, "_check_mountable", lambda run: None)
    with hours_later(sim, 2):
        assert recovery_run(recovery_id=recovery.pk, request_id="run-race") == RecoveryRequest.Status.FAILED
    recovery.refresh_from_db()
    assert "has left the journal on Site B" in recovery.error, (zvm_said, recovery.error)
    # No mount of ours is left behind (a failed session is unmounted, a refused one never existed).
    assert all(s.status in ("ended", "unmounting") for s in recovery.sessions.all())
