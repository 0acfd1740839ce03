"""The polling budget of the checkpoint wait, with plain numbers (no clock, no ZVM)."""

from __future__ import annotations

import itertools

from rewind.checkpoints.pacing import (
    LONG_SLEEP_S,
    MAX_GAP_S,
    MIN_GAP_S,
    Forecast,
    calls_bound,
    forecast,
    next_gap,
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
    from rewind.checkpoints.pacing import WINDOW_ASKS, Forecast, next_gap

    fc = Forecast(expected_s=5.0, early_s=2.5)  # a ZVM whose times scatter over 5 s
    elapsed, asks = fc.window_start_s, 0
    while elapsed <= fc.window_end_s:
        elapsed += next_gap(elapsed, 100.0, fc)
        asks += 1
    assert asks <= WINDOW_ASKS + 1


def test_a_site_is_crowded_when_one_look_at_each_vpg_outlasts_the_window() -> None:
    from rewind.checkpoints.pacing import crowded

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
