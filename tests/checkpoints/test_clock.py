"""Guards against ZVMs whose clocks run minutes off ours: windows in the ZVM's time, offsets shown."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.core.management import call_command
from django.utils import timezone

from rewind.checkpoints import poll_timing
from rewind.models import AuditEvent, ChangeGuard, Site, TaggedCheckpoint
from tests.fixtures import InlineTasks
from tests.helpers import guard_request, tagged_rows, wait_guard_finished

FIVE_MINUTES = 300.0


def _clock(sim: Any, slug: str | None, offset_s: float) -> None:
    sim.control("POST", "variants", {"site": slug, "clock_offset_s": offset_s})


@pytest.mark.parametrize("offset_s", [-FIVE_MINUTES, FIVE_MINUTES], ids=["behind", "ahead"])
def test_a_guard_on_a_zvm_whose_clock_is_off_finds_its_checkpoints(
    sim: Any, sites: Any, agent: Any, inline_tasks: InlineTasks, offset_s: float
) -> None:
    _clock(sim, "site-a", offset_s)
    guard = wait_guard_finished(guard_request(agent, "app01", timeout_s=40), tasks=inline_tasks)
    assert guard.status == ChangeGuard.Status.OK, guard.error
    for vpg in ("vpg-app-1", "vpg-app-2", "vpg-app-3"):
        assert len(tagged_rows(sim, "site-a", vpg, guard.tag)) == 1  # inserted once each
    # The wait measured the ZVM's clock and stored it on the site.
    site = Site.objects.get(name="Site A")
    assert site.clock_offset_s is not None
    assert abs(site.clock_offset_s - offset_s) < 2
    # The audit shows the checkpoint's time as the ZVM shows it and on our clock.
    listed = AuditEvent.objects.filter(action="guard.checkpoint.listed", target_id=str(guard.pk))
    assert listed.count() == 3
    for event in listed:
        assert abs(event.data["clock_offset_s"] - offset_s) < 2
        assert event.data["checkpoint_timestamp"] != event.data["checkpoint_time_ours"]


@pytest.mark.parametrize("offset_s", [-FIVE_MINUTES, FIVE_MINUTES], ids=["behind", "ahead"])
def test_a_guard_on_a_zvm_whose_clock_is_off_honours_timeout_s(
    sim: Any, sites: Any, agent: Any, inline_tasks: InlineTasks, offset_s: float
) -> None:
    _clock(sim, "site-a", offset_s)
    sim.add_fault("checkpoint_never_listed", site="site-a")
    before = sim.requests_seen("site-a")
    guard = wait_guard_finished(guard_request(agent, "db01", timeout_s=4), tasks=inline_tasks)
    assert guard.status == ChangeGuard.Status.FAILED
    row = guard.vpgs.get()
    assert row.status == TaggedCheckpoint.Status.TIMED_OUT
    assert "within 4 s" in row.error
    # Insert, lookups and logins, plus at most a task read and a list per look the pacing allows.
    budget = 10 + 2 * poll_timing.calls_bound(4.0, None)
    assert sim.requests_seen("site-a") - before <= budget


def test_the_offset_is_measured_and_shown_by_zvm_check_and_the_admin(
    sim: Any, sites: Any, admin_client: Any, capsys: Any
) -> None:
    _clock(sim, "site-b", FIVE_MINUTES)
    call_command("zvm_check")
    out = capsys.readouterr().out
    line_b = next(line for line in out.splitlines() if line.startswith("Site B:"))
    line_a = next(line for line in out.splitlines() if line.startswith("Site A:"))
    assert "clock +300" in line_b or "clock +299" in line_b, line_b
    assert "WARNING" in line_b
    assert "ahead of ours" in line_b
    assert "clock +0.0 s" in line_a
    assert "WARNING" not in line_a
    page = admin_client.get("/admin/rewind/site/").content.decode()
    assert "ahead of ours" in page


def test_a_process_whose_own_clock_runs_ahead_does_not_end_a_waiting_guard(
    sim: Any, sites: Any, agent: Any, inline_tasks: InlineTasks
) -> None:
    # The ZVM is right and so is the database; only this process's clock is five minutes ahead
    # (the guard's timeout is 300 s): its rounds must not take the guard for timed out.
    sim.add_fault("checkpoint_listing_delay", seconds=4, site="site-a")
    guard = guard_request(agent, "app01", timeout_s=300)
    waiting = TaggedCheckpoint.Status.WAITING
    inline_tasks.wait_for(lambda: guard.vpgs.filter(status=waiting).count() == guard.vpgs.count())
    with time_machine.travel(timezone.now() + timedelta(seconds=FIVE_MINUTES + 1), tick=True):
        done = wait_guard_finished(guard, tasks=inline_tasks)
    assert done.status == ChangeGuard.Status.OK, done.error
    assert not guard.vpgs.filter(status=TaggedCheckpoint.Status.TIMED_OUT).exists()
