"""When to ask a ZVM again whether a tagged checkpoint is listed: plain numbers in, seconds out (docs/guard.md,
"Pacing").

A site's ZVM takes about the same time to list a checkpoint guard after guard, so the wait learns that time from
the site's recent guards: it sleeps before it, asks often near it, and backs off past it, so a fast ZVM is seen
quickly and a slow one costs few calls. A ZVM whose time changes is followed within a few guards, where a median
of 20 would take ten: a probe (a look early after a first-look hit) sees a faster one, a shift (the newest
samples all outside the window) a changed one. A ``crowded`` site, where one look at each waiting VPG outlasts
the window, waits for the window's end instead, so each VPG costs about one listing.

Pure: no clock, no database, no ZVM.
"""

from __future__ import annotations

import dataclasses
import itertools
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import overload

HISTORY = 20  # recent listed guards per site that the forecast looks at
MIN_SAMPLES = 3  # fewer: no forecast, the cold schedule applies
MIN_GAP_S = 0.05  # never ask more often than this
LONG_SLEEP_S = 10.0  # longest sleep before the expected moment
MAX_GAP_S = 5.0  # longest gap once the expected moment is past, or without history
COLD_FIRST_S = 0.5  # without history: the first gap; each next one is a share of the time waited
COLD_FRACTION = 0.2
NEAR_FRACTION = 0.03  # near the expected moment: gap = this share of it (at least MIN_GAP_S)
# ... and at most this many asks across the window: a ZVM whose times scatter widely (a wide
# window) is not asked dozens of times per VPG.
WINDOW_ASKS = 8
LATE_FRACTION = 0.5  # past the window: gap = this share of the time overdue
SHIFT_SAMPLES = 2  # the newest samples all outside the window on one side: the ZVM changed
PROBE_SHARE = 0.25  # after a sample below the window, the next guard's first look, as a share of it
PROBE_GROWTH = 0.5  # ... then gaps of this share of the time waited, up to the window
# At most this many VPGs of a site probe at a time, oldest guards first: one look is enough to see a faster ZVM,
# and a burst's guards all probing cost every VPG several early looks (measured: see the benchmarks page).
PROBE_VPGS = 2


@dataclass(frozen=True)
class Forecast:
    """When a site's ZVM usually lists a checkpoint, in seconds after the insert started."""

    expected_s: float  # the median of the recent guards
    early_s: float  # half-width of the window around it where the wait asks often
    probe_s: float | None = None  # a look this early first: the newest sample said the ZVM may be faster

    @property
    def window_start_s(self) -> float:
        return max(0.0, self.expected_s - self.early_s)

    @property
    def window_end_s(self) -> float:
        return self.expected_s + self.early_s


def forecast(samples_s: Sequence[float]) -> Forecast | None:
    """The forecast from recent times-to-listed (seconds, newest first), or None if too few. Median and median
    absolute deviation, so one hiccup moves neither; the window is at least 5% of the expectation and 0.15 s
    wide on each side, so a steady ZVM is still polled a few times around the moment."""
    recent = [s for s in samples_s[:HISTORY] if s >= 0]
    if len(recent) < MIN_SAMPLES:
        return None
    fc = _median_forecast(recent)
    below = list(itertools.takewhile(lambda s: s < fc.window_start_s, recent))
    above = list(itertools.takewhile(lambda s: s > fc.window_end_s, recent))
    if len(below) >= SHIFT_SAMPLES:
        return _window(min(below), 0.0)
    if len(above) >= SHIFT_SAMPLES:
        return _median_forecast(above)
    if below:
        return Forecast(fc.expected_s, fc.early_s, probe_s=max(MIN_GAP_S, PROBE_SHARE * below[0]))
    return fc


def _median_forecast(samples: Sequence[float]) -> Forecast:
    expected = statistics.median(samples)
    return _window(expected, statistics.median(abs(s - expected) for s in samples))


def _window(expected: float, mad: float) -> Forecast:
    return Forecast(expected_s=expected, early_s=max(0.15, 0.05 * expected, 2.0 * mad))


@overload
def probing(fc: Forecast, vpg: str, probers: set[str]) -> Forecast: ...
@overload
def probing(fc: None, vpg: str, probers: set[str]) -> None: ...
@overload
def probing(fc: Forecast | None, vpg: str, probers: set[str]) -> Forecast | None: ...
def probing(fc: Forecast | None, vpg: str, probers: set[str]) -> Forecast | None:
    """The forecast a row of ``vpg`` waits by: without the probe unless its VPG is one of ``probers``."""
    if fc is None or fc.probe_s is None or vpg in probers:
        return fc
    return dataclasses.replace(fc, probe_s=None)


def probers(vpgs_oldest_first: Iterable[str]) -> set[str]:
    """The VPGs that may probe (``PROBE_VPGS`` of them), from a site's waiting VPGs, oldest guard first."""
    return set(itertools.islice(dict.fromkeys(vpgs_oldest_first), PROBE_VPGS))


def crowded(vpgs: int, per_s: float, fc: Forecast | None) -> bool:
    """Whether one look at each of a site's ``vpgs`` waiting VPGs, at ``per_s`` requests per
    second, takes longer than the forecast's whole window (see the module)."""
    return fc is not None and per_s > 0 and vpgs / per_s > 2 * fc.early_s


def next_gap(elapsed_s: float, remaining_s: float, fc: Forecast | None, *, crowded: bool = False) -> float:
    """Seconds to sleep before the next call, ``elapsed_s`` after the insert started; never past the deadline
    (``remaining_s``). ``crowded``: the first look waits for the window's end."""
    gap = _cold_gap(elapsed_s) if fc is None else _forecast_gap(elapsed_s, fc, crowded)
    return max(0.0, min(gap, remaining_s))


def _cold_gap(elapsed_s: float) -> float:
    return min(MAX_GAP_S, max(COLD_FIRST_S, COLD_FRACTION * elapsed_s))


def first_look_s(fc: Forecast, *, crowded: bool) -> float:
    """When, after the insert started, a row waiting by ``fc`` looks first (a probe included)."""
    if fc.probe_s is not None and not crowded:
        return fc.probe_s
    return fc.window_end_s if crowded else fc.window_start_s


def _forecast_gap(elapsed_s: float, fc: Forecast, crowded: bool) -> float:
    near = max(MIN_GAP_S, NEAR_FRACTION * fc.expected_s, 2 * fc.early_s / WINDOW_ASKS)
    window_look_s = fc.window_end_s if crowded else fc.window_start_s
    if fc.probe_s is not None and not crowded and elapsed_s < window_look_s:
        # A crowded site has no slot to spare for a probe; its first looks wait for the window's end.
        if elapsed_s < fc.probe_s:
            return min(LONG_SLEEP_S, max(MIN_GAP_S, fc.probe_s - elapsed_s))
        # Between the probe and the window, quickly growing gaps, landing on the window.
        return max(near, min(window_look_s - elapsed_s, PROBE_GROWTH * elapsed_s))
    if elapsed_s < window_look_s:
        # Wake at that moment (not a fixed share of it): the first look lands just before the
        # moment the ZVM usually lists (just after it when crowded), whatever the expectation.
        return min(LONG_SLEEP_S, max(MIN_GAP_S, window_look_s - elapsed_s))
    if elapsed_s <= fc.window_end_s:
        return near
    overdue = elapsed_s - fc.window_end_s
    return min(MAX_GAP_S, max(near, LATE_FRACTION * overdue))


def calls_bound(timeout_s: float, fc: Forecast | None) -> int:
    """An upper bound of the sleeps ``next_gap`` hands out over a wait of ``timeout_s`` (the schedule with the
    listing never arriving), for tests and budgets."""
    elapsed, count = 0.0, 0
    while elapsed < timeout_s:
        gap = next_gap(elapsed, timeout_s - elapsed, fc)
        if gap <= 0:
            break
        elapsed += gap
        count += 1
    return count
