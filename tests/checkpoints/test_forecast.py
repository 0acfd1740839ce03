"""The retention estimate from a VPG's HistoryStatusApi, field by field (no ZVM, no database)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from rewind.checkpoints.forecast import journal_forecast
from rewind.zvm import Checkpoint, JournalHistory, Vpg

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
TAKEN = NOW - timedelta(hours=1)


def _forecast(history: JournalHistory, *, offset_s: float = 0.0, taken: datetime = TAKEN, cp: str = "500"):
    return journal_forecast(history, checkpoint_id=cp, checkpoint_at=taken, offset_s=offset_s, now=NOW)


def _earliest(at: datetime, identifier: str = "100") -> Checkpoint:
    return Checkpoint(identifier=identifier, timestamp=at)


def test_it_estimates_checkpoint_time_plus_the_actual_history() -> None:
    out = _forecast(
        JournalHistory(actual_minutes=1440, configured_minutes=1440, earliest=_earliest(NOW - timedelta(days=1)))
    )
    assert out.leaves_at == TAKEN + timedelta(days=1)
    assert out.history_minutes == 1440
    assert out.gone is False


def test_a_filling_journal_gives_the_early_side_and_a_fuller_one_a_later_estimate() -> None:
    young = _forecast(JournalHistory(actual_minutes=120, configured_minutes=1440))
    older = _forecast(JournalHistory(actual_minutes=600, configured_minutes=1440))
    assert young.leaves_at == TAKEN + timedelta(hours=2)
    assert older.leaves_at == TAKEN + timedelta(hours=10)


def test_the_configured_history_caps_the_actual_one() -> None:
    out = _forecast(JournalHistory(actual_minutes=1500, configured_minutes=1440))
    assert out.leaves_at == TAKEN + timedelta(minutes=1440)


def test_without_the_actual_history_the_earliest_checkpoint_tells_the_reach() -> None:
    out = _forecast(JournalHistory(configured_minutes=1440, earliest=_earliest(NOW - timedelta(hours=6))))
    assert out.leaves_at == TAKEN + timedelta(hours=6)
    assert out.history_minutes == 360


@pytest.mark.parametrize(
    "history",
    [JournalHistory(), JournalHistory(configured_minutes=1440), JournalHistory(earliest=Checkpoint("1", None))],
)
def test_too_little_to_go_on_gives_no_estimate(history: JournalHistory) -> None:
    out = _forecast(history)
    assert (out.leaves_at, out.history_minutes, out.gone) == (None, None, False)


def test_an_earliest_checkpoint_younger_than_ours_means_it_left() -> None:
    out = _forecast(JournalHistory(actual_minutes=30, earliest=_earliest(NOW - timedelta(minutes=30))))
    assert out.gone is True
    assert out.leaves_at == TAKEN + timedelta(minutes=30)  # when the journal's reach passed it


def test_our_checkpoint_as_the_earliest_is_still_there_and_leaves_now() -> None:
    out = _forecast(JournalHistory(actual_minutes=30, earliest=Checkpoint("500", TAKEN)))
    assert out.gone is False
    assert out.leaves_at == NOW  # overdue by the figures, yet still listed: any moment


def test_an_older_earliest_checkpoint_outweighs_the_actual_history() -> None:
    out = _forecast(JournalHistory(actual_minutes=10, earliest=_earliest(TAKEN - timedelta(minutes=5))))
    assert out.gone is False


def test_without_an_earliest_checkpoint_the_reach_decides_with_a_margin() -> None:
    assert _forecast(JournalHistory(actual_minutes=59)).gone is False  # within the rounding margin
    assert _forecast(JournalHistory(actual_minutes=50)).gone is True
    left = _forecast(JournalHistory(actual_minutes=30))
    assert left.gone is True
    assert left.leaves_at == TAKEN + timedelta(minutes=30)


def test_a_left_checkpoint_without_any_history_figure_has_no_time() -> None:
    out = _forecast(JournalHistory(earliest=Checkpoint("900", None)))
    assert out.gone is False  # an earliest checkpoint without a time says nothing


def test_the_zvm_clock_offset_converts_to_ours() -> None:
    # The ZVM runs 5 minutes ahead: it listed our checkpoint at TAKEN + 5 min on its clock.
    out = _forecast(JournalHistory(actual_minutes=60 * 24), offset_s=300, taken=TAKEN + timedelta(minutes=5))
    assert out.leaves_at == TAKEN + timedelta(days=1)


def test_the_client_reads_history_status_tolerantly() -> None:
    vpg = Vpg.from_json(
        {
            "VpgIdentifier": "v",
            "historystatusapi": {
                "actualHistoryInMinutes": "240",
                "ConfiguredHistoryInMinutes": 1440,
                "EarliestCheckpoint": {"CheckpointIdentifier": 7, "TimeStamp": "2026-03-01T08:00:00.000Z"},
            },
        }
    )
    assert vpg.history.actual_minutes == 240
    assert vpg.history.configured_minutes == 1440
    assert vpg.history.earliest == Checkpoint("7", datetime(2026, 3, 1, 8, tzinfo=UTC), None, None)
    broken_answers: tuple[object, ...] = (
        None,
        "x",
        {"ActualHistoryInMinutes": -5, "ConfiguredHistoryInMinutes": 0},
        {"EarliestCheckpoint": []},
    )
    for broken in broken_answers:
        history = Vpg.from_json({"VpgIdentifier": "v", "HistoryStatusApi": broken}).history
        assert history == JournalHistory()
