"""The retention forecast against the simulator: fresh and aged checkpoints, every HistoryStatusApi
variant, the warning once per row within REWIND_RETENTION_WARN_H, and the beat task.

Hours pass at once: the simulator's clock moves (``sim.advance_clock``) and this process's
with it (``time_machine``), so both sides agree on the time, as a real ZVM and this service do.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.utils import timezone

from rewind.checkpoints.retention import (
    retention_refresh_sweep,
    retention_warning_record,
    retention_warnings_sweep,
)
from rewind.checkpoints.tasks import checkpoints_retention
from rewind.models import AuditEvent, ChangeGuard, TaggedCheckpoint
from tests.helpers import insert_tagged_checkpoint

pytestmark = pytest.mark.timeout(300)
HOUR = 3600.0
WARNING = "guard.checkpoint.retention_warning"
LEFT = "guard.checkpoint.left_journal"


@contextmanager
def hours_later(sim: Any, hours: float) -> Iterator[None]:
    """``hours`` pass for the simulated ZVMs and for this process alike."""
    sim.advance_clock(hours * HOUR)
    with time_machine.travel(timezone.now() + timedelta(hours=hours), tick=True):
        yield


def _row(guard: ChangeGuard) -> TaggedCheckpoint:
    return guard.vpgs.get()


def _close(a: Any, b: Any, seconds: float = 120) -> bool:
    return abs((a - b).total_seconds()) <= seconds


def test_a_fresh_checkpoint_leaves_a_day_after_it_was_taken(sim: Any, sites: Any) -> None:
    guard = insert_tagged_checkpoint(sim, sites, "db01", "chg-fresh")
    report = retention_refresh_sweep()
    assert (report.vpgs_asked, report.estimated, report.site_errors) == (1, 1, {})
    row = _row(guard)
    assert row.checkpoint_timestamp is not None
    assert row.leaves_journal_at is not None
    assert _close(row.leaves_journal_at, row.checkpoint_timestamp + timedelta(days=1))
    assert row.journal_history_minutes == 1440
    assert row.journal_estimated_at is not None
    assert row.left_journal_seen_at is None


def test_a_shorter_history_brings_the_estimate_forward(sim: Any, sites: Any) -> None:
    guard = insert_tagged_checkpoint(sim, sites, "db01", "chg-short")
    sim.set_journal_history("vpg-db", 180)
    retention_refresh_sweep()
    row = _row(guard)
    assert row.checkpoint_timestamp is not None
    assert row.leaves_journal_at is not None
    assert _close(row.leaves_journal_at, row.checkpoint_timestamp + timedelta(hours=3))
    assert row.journal_history_minutes == 180


def test_an_aged_checkpoint_is_seen_gone_once_and_not_asked_about_again(sim: Any, sites: Any) -> None:
    guard = insert_tagged_checkpoint(sim, sites, "db01", "chg-aged")
    sim.set_journal_history("vpg-db", 120)
    retention_refresh_sweep()
    with hours_later(sim, 3):
        report = retention_refresh_sweep()
        assert report.left_journal == 1
        row = _row(guard)
        assert row.left_journal_seen_at is not None
        assert row.checkpoint_timestamp is not None
        assert row.leaves_journal_at is not None
        assert _close(row.leaves_journal_at, row.checkpoint_timestamp + timedelta(hours=2))
        assert row.leaves_journal_at < timezone.now()
        (event,) = AuditEvent.objects.filter(action=LEFT, target_id=str(guard.pk))
        assert event.data["checkpoint_identifier"] == row.checkpoint_identifier
        again = retention_refresh_sweep()
        assert (again.vpgs_asked, again.left_journal) == (0, 0)
    assert AuditEvent.objects.filter(action=LEFT).count() == 1


def test_one_vpg_read_serves_every_row_of_that_vpg_on_each_site(sim: Any, sites: Any) -> None:
    first = insert_tagged_checkpoint(sim, sites, "app01", "chg-1")
    second = insert_tagged_checkpoint(sim, sites, "app01", "chg-2")
    before = sim.calls("site-a").get("GET /v1/vpgs/{vpg_id}", 0)
    report = retention_refresh_sweep()
    assert (report.vpgs_asked, report.estimated) == (3, 6)  # app01 is in three VPGs
    assert sim.calls("site-a")["GET /v1/vpgs/{vpg_id}"] - before == 3
    for guard in (first, second):
        assert all(r.leaves_journal_at is not None for r in guard.vpgs.all())


@pytest.mark.parametrize(
    ("preset", "estimated"),
    [("history-no-actual", True), ("history-configured-only", False), ("history-missing", False), ("hostile", False)],
)
def test_history_status_variants_estimate_or_say_nothing_never_crash(
    sim: Any, sites: Any, preset: str, estimated: bool
) -> None:
    guard = insert_tagged_checkpoint(sim, sites, "db01", "chg-variant")
    sim.set_variants(preset=preset)
    report = retention_refresh_sweep()
    assert report.site_errors == {}
    row = _row(guard)
    assert (row.leaves_journal_at is not None) is estimated
    assert row.left_journal_seen_at is None
    if estimated:
        # From the earliest listed checkpoint (4 h old): the early side of the truth (24 h).
        assert row.checkpoint_timestamp is not None
        assert row.leaves_journal_at is not None
        assert _close(row.leaves_journal_at, row.checkpoint_timestamp + timedelta(hours=4))
    else:
        assert report.no_estimate == 1
    assert retention_warnings_sweep() == ([row] if estimated else [])


def test_a_zvm_that_cannot_be_asked_changes_nothing(sim: Any, sites: Any) -> None:
    guard = insert_tagged_checkpoint(sim, sites, "db01", "chg-down")
    retention_refresh_sweep()
    estimated = _row(guard).leaves_journal_at
    sim.add_fault("http_error", site="site-a", status=503, path_regex="/v1/vpgs/", count=10)
    with hours_later(sim, 30):
        report = retention_refresh_sweep()
        assert list(report.site_errors) == ["Site A/vpg-db"]
        row = _row(guard)
        assert row.leaves_journal_at == estimated
        assert row.left_journal_seen_at is None


def test_the_warning_is_recorded_once_per_row_within_the_window(sim: Any, sites: Any, settings: Any) -> None:
    settings.REWIND_RETENTION_WARN_H = 4
    guard = insert_tagged_checkpoint(sim, sites, "db01", "chg-warn")
    retention_refresh_sweep()
    row = _row(guard)
    assert row.leaves_journal_at is not None
    now = timezone.now()
    assert retention_warnings_sweep(now=now) == []  # a day ahead: outside the 4 h window
    assert retention_warnings_sweep(now=row.leaves_journal_at - timedelta(hours=5)) == []
    warned = retention_warnings_sweep(now=row.leaves_journal_at - timedelta(hours=3))
    assert [r.pk for r in warned] == [row.pk]
    assert retention_warnings_sweep(now=row.leaves_journal_at - timedelta(hours=1)) == []
    assert retention_warning_record(row=row) is False
    (event,) = AuditEvent.objects.filter(action=WARNING)
    assert event.target_id == str(guard.pk)
    assert event.data["vpg"] == "vpg-db"
    assert event.data["hours_left"] == 3.0
    assert event.data["leaves_journal_at"] == row.leaves_journal_at.isoformat()
    row.refresh_from_db()
    assert row.retention_warned_at is not None


def test_no_warning_when_the_window_is_zero_or_the_checkpoint_is_gone(sim: Any, sites: Any, settings: Any) -> None:
    guard = insert_tagged_checkpoint(sim, sites, "db01", "chg-nowarn")
    sim.set_journal_history("vpg-db", 60)
    retention_refresh_sweep()
    settings.REWIND_RETENTION_WARN_H = 0
    assert retention_warnings_sweep() == []
    with hours_later(sim, 2):
        retention_refresh_sweep()
        assert _row(guard).left_journal_seen_at is not None
        settings.REWIND_RETENTION_WARN_H = 24
        assert retention_warnings_sweep() == []


def test_the_beat_task_estimates_then_warns_and_reports_the_rows(sim: Any, sites: Any, settings: Any) -> None:
    settings.REWIND_RETENTION_WARN_H = 24  # the simulator's journals keep a day: every fresh checkpoint is within
    guard = insert_tagged_checkpoint(sim, sites, "web01", "chg-beat")
    result = checkpoints_retention()
    rows = sorted(r.pk for r in guard.vpgs.all())
    assert result["vpgs_asked"] == 2
    assert sorted(result["warned"]) == rows
    assert AuditEvent.objects.filter(action=WARNING).count() == 2
    assert checkpoints_retention()["warned"] == []
