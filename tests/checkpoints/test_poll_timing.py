"""The polling budget of the checkpoint wait, with plain numbers (no clock, no ZVM)."""

from __future__ import annotations

import itertools

import pytest

from rewind.checkpoints.poll_timing import (
    LONG_SLEEP_S,
    MAX_GAP_S,
    MIN_GAP_S,
    PROBE_VPGS,
    Forecast,
    calls_bound,
    forecast,
    next_gap,
    probers,
    probing,
)


def _schedule(listed_at: float, fc: Forecast | None, timeout: float = 300.0) -> list[float]:
    """The moments the wait looks, until the first look at or after ``listed_at``."""
    t, looks = 0.0, []
    while t < timeout:
        t += next_gap(t, timeout - t, fc)
        looks.append(t)
        if t >= listed_at:
            break
    return looks


def test_too_little_history_gives_no_forecast() -> None:
    assert forecast([]) is None
    assert forecast([3.0, 3.1]) is None


def test_the_forecast_is_the_median_and_ignores_an_outlier() -> None:
    fc = forecast([3.3, 3.2, 3.4, 60.0, 3.3])
    assert fc is not None
    assert fc.expected_s == 3.3
    assert fc.window_start_s < 3.3 < fc.window_end_s
    assert fc.early_s < 1.0  # one slow guard does not widen the window much


def test_only_the_newest_samples_count() -> None:
    fc = forecast([1.0] * 20 + [50.0] * 30)
    assert fc is not None
    assert fc.expected_s == 1.0


def test_with_history_a_3_s_listing_is_seen_in_a_few_looks_and_little_late() -> None:
    fc = forecast([3.3] * 20)
    looks = _schedule(3.3, fc)
    assert len(looks) <= 5
    assert looks[-1] - 3.3 <= 0.15


def test_a_listing_later_than_usual_backs_off() -> None:
    fc = forecast([3.0] * 20)
    looks = _schedule(60.0, fc)
    assert len(looks) <= 30
    gaps = [b - a for a, b in itertools.pairwise(looks)]
    assert max(gaps) <= MAX_GAP_S + 1e-9
    assert gaps[-1] > gaps[3]  # the gaps grew again past the window


def test_without_history_it_starts_modest_and_grows() -> None:
    looks = _schedule(3.3, None)
    assert len(looks) <= 9
    assert looks[0] >= 0.25
    gaps = [b - a for a, b in itertools.pairwise(looks)]
    assert gaps == sorted(gaps)
    assert looks[-1] - 3.3 <= 0.2 * 3.3 + 0.5


def test_a_long_expectation_still_looks_now_and_then() -> None:
    fc = forecast([120.0] * 10)
    assert fc is not None
    assert next_gap(0.0, 300.0, fc) == LONG_SLEEP_S


def test_the_deadline_caps_every_sleep() -> None:
    fc = forecast([30.0] * 10)
    assert next_gap(0.0, 2.0, fc) == 2.0
    assert next_gap(5.0, 0.0, None) == 0.0
    assert next_gap(100.0, -1.0, fc) == 0.0


def test_never_faster_than_the_minimum_gap() -> None:
    fc = Forecast(expected_s=0.2, early_s=0.15)
    assert next_gap(0.1, 10.0, fc) >= MIN_GAP_S
    assert next_gap(0.01, 10.0, fc) >= MIN_GAP_S


def test_calls_bound_counts_a_whole_timeout() -> None:
    assert calls_bound(40.0, None) <= 25
    assert calls_bound(40.0, forecast([3.0] * 20)) <= 25
    assert calls_bound(0.0, None) == 0


def test_a_wide_window_is_asked_a_bounded_number_of_times() -> None:
    from rewind.checkpoints.poll_timing import WINDOW_ASKS, Forecast, next_gap

    fc = Forecast(expected_s=5.0, early_s=2.5)  # a ZVM whose times scatter over 5 s
    elapsed, asks = fc.window_start_s, 0
    while elapsed <= fc.window_end_s:
        elapsed += next_gap(elapsed, 100.0, fc)
        asks += 1
    assert asks <= WINDOW_ASKS + 1


def test_a_site_is_crowded_when_one_look_at_each_vpg_outlasts_the_window() -> None:
    from rewind.checkpoints.poll_timing import crowded

    fc = Forecast(expected_s=5.2, early_s=0.26)  # a window of 0.52 s
    assert not crowded(3, 10.0, fc)  # 0.3 s for one look at each of 3 VPGs at 10/s
    assert crowded(10, 10.0, fc)  # 1 s
    assert not crowded(40, 100.0, fc)
    assert crowded(129, 100.0, fc)
    assert not crowded(500, 10.0, None)  # no forecast: the cold schedule, crowded or not


def test_a_crowded_site_looks_first_at_the_windows_end_and_finds_it_in_one_look() -> None:
    fc = forecast([5.2] * 20)
    assert fc is not None
    calm = next_gap(0.0, 300.0, fc)
    busy = next_gap(0.0, 300.0, fc, crowded=True)
    assert calm == fc.window_start_s
    assert busy == fc.window_end_s
    # Past its first look a crowded row is asked as any other: the ZVM was slower than usual.
    assert next_gap(fc.window_end_s + 1.0, 300.0, fc, crowded=True) == next_gap(fc.window_end_s + 1.0, 300.0, fc)
    looks, t = [], 0.0
    while t < 5.2:
        t += next_gap(t, 300.0 - t, fc, crowded=True)
        looks.append(t)
    assert len(looks) == 1


def _one_wait(listed_at: float, samples: list[float]) -> float:
    """One guard's wait against a ZVM listing at ``listed_at``; its sample goes to the front of ``samples``.

    The sample is what the poll round records (poll_round.listing_time_ms): between the last
    miss and the hit, or, for a hit at the first look, that look's time x UNSEEN_SHARE, or the
    forecast when the first look came no sooner than it.
    """
    from datetime import UTC, datetime, timedelta

    from rewind.checkpoints.models import TaggedCheckpoint
    from rewind.checkpoints.poll_round import listing_time_ms

    fc = forecast(samples)
    looks = _schedule(listed_at, fc)
    seen, missed = looks[-1], looks[-2] if len(looks) > 1 else None
    start = datetime(2026, 1, 1, tzinfo=UTC)
    row = TaggedCheckpoint(insert_started_at=start)
    row.last_miss_at = None if missed is None else start + timedelta(seconds=missed)
    ms = listing_time_ms(row, start + timedelta(seconds=seen), fc=fc)
    assert ms is not None
    samples.insert(0, ms / 1000)
    return seen


def test_a_zvm_that_became_faster_is_learned_within_three_guards() -> None:
    samples: list[float] = []
    for _ in range(20):
        _one_wait(5.3, samples)
    waits = [_one_wait(1.3, samples) for _ in range(5)]
    # The first guard cannot know: it sleeps until the old moment. The second probes early and
    # times the new listing between a miss and a hit; the third waits as little as a steady one.
    assert waits[0] > 4.0
    assert waits[1] <= 1.3 * 1.2
    assert all(w <= 1.3 * 1.1 for w in waits[2:]), waits
    fc = forecast(samples)
    assert fc is not None
    assert abs(fc.expected_s - 1.3) < 0.1


def test_a_zvm_that_became_slower_is_learned_within_five_guards() -> None:
    samples: list[float] = []
    for _ in range(20):
        _one_wait(1.3, samples)
    waits = [_one_wait(5.3, samples) for _ in range(5)]
    # Past the window the gaps grow with the time overdue, so the first slow guards are timed
    # loosely; two of them shift the forecast, and a probe then times it between a miss and a hit.
    assert all(w <= 5.3 * 1.15 for w in waits[2:]), waits
    assert waits[-1] <= 5.3 * 1.1, waits
    fc = forecast(samples)
    assert fc is not None
    assert abs(fc.expected_s - 5.3) < 0.3


def test_one_early_listing_costs_one_probe_and_moves_nothing() -> None:
    samples = [5.3] * 19
    samples.insert(0, 4.3)  # one first-look hit: an upper bound below the window
    fc = forecast(samples)
    assert fc is not None
    assert fc.probe_s is not None
    assert fc.expected_s == 5.3  # a probe, not a shift
    looks = _schedule(5.3, fc)
    assert looks[0] == pytest.approx(fc.probe_s)
    assert len(looks) <= 8  # the probe and the growing gaps up to the window cost a few looks
    assert looks[-1] - 5.3 <= 0.3
    # A crowded site has no slot for a probe: its first look still waits for the window's end.
    assert next_gap(0.0, 300.0, fc, crowded=True) == fc.window_end_s


def test_two_slow_guards_in_a_row_shift_the_forecast_and_one_does_not() -> None:
    one = forecast([9.0, *[5.0] * 19])
    two = forecast([9.0, 9.2, *[5.0] * 18])
    assert one is not None
    assert one.expected_s == 5.0
    assert two is not None
    assert two.expected_s == pytest.approx(9.1)


def test_only_the_oldest_waiting_vpgs_probe() -> None:
    fc = forecast([4.3, *[5.3] * 19])
    assert fc is not None
    assert fc.probe_s is not None
    # Oldest guard first; a VPG two guards share counts once.
    chosen = probers(["vpg-1", "vpg-1", "vpg-2", "vpg-3", "vpg-4"])
    assert PROBE_VPGS == 2
    assert chosen == {"vpg-1", "vpg-2"}
    assert probing(fc, "vpg-2", chosen) == fc
    others = probing(fc, "vpg-3", chosen)
    assert others is not None
    assert others.probe_s is None
    assert (others.expected_s, others.early_s) == (fc.expected_s, fc.early_s)
    # A VPG that does not probe sleeps until the window: no early looks at all.
    assert next_gap(0.0, 300.0, others) == pytest.approx(fc.window_start_s)
    assert probing(None, "vpg-3", chosen) is None
