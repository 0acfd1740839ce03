"""A ZVM's clock beside ours, from the Date header of its answers: plain numbers."""

from __future__ import annotations

from datetime import UTC, datetime
from email.utils import formatdate

from rewind.zvm.clock import ZvmClock, date_header_bounds, estimate, from_zvm, to_zvm

T = 1_800_000_000.0  # our epoch seconds at a reading


def test_one_answer_bounds_the_offset_by_its_second_and_round_trip() -> None:
    low, high = date_header_bounds(formatdate(T - 300, usegmt=True), T + 0.4, 0.1) or (0.0, 0.0)
    assert abs(low - -300.4) < 1e-6
    assert abs(high - (-300 + 1 - 0.3)) < 1e-6


def test_a_missing_or_bad_date_is_ignored() -> None:
    assert date_header_bounds(None, T, 0.0) is None
    assert date_header_bounds("not a date", T, 0.0) is None


def test_readings_intersect_and_a_clock_set_starts_afresh() -> None:
    # Three readings 300 s behind at different fractions of a second narrow the bounds.
    readings = [(-300.6, -299.5, T), (-300.2, -299.1, T + 1), (-300.9, -299.9, T + 2)]
    got = estimate(readings)
    assert got is not None
    assert got.low_s == -300.2
    assert got.high_s == -299.9
    assert got.uncertainty_s < 0.2
    # The ZVM's clock was set right: the newest reading wins over the contradicting older ones.
    got = estimate([*readings, (-0.3, 0.6, T + 3)])
    assert got is not None
    assert got.offset_s == 0.0


def test_bounds_around_zero_mean_the_same_clock() -> None:
    got = estimate([(-0.4, 0.7, T)])
    assert got is not None
    assert got.offset_s == 0.0


def test_the_clock_keeps_recent_readings_only() -> None:
    clock = ZvmClock()
    clock.observe(formatdate(T + 120, usegmt=True), T, 0.01)
    got = clock.offset(now=T + 1)
    assert got is not None
    assert 119 < got.offset_s < 121
    assert clock.offset(now=T + 3600) is None


def test_conversions_go_both_ways() -> None:
    ours = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    assert to_zvm(ours, -300) == datetime(2026, 1, 1, 11, 55, tzinfo=UTC)
    assert from_zvm(to_zvm(ours, 42.5), 42.5) == ours
