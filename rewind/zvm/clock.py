"""A ZVM's clock beside ours: ``offset = ZVM time - our time``, learned from the ``Date`` of its answers.

Every window sent to a ZVM must be in its time and every time it shows converted to ours. A ``Date`` has whole
seconds, so one answer bounds the offset to ``(D - received, D + 1 - sent)``; the bounds of recent answers
intersect to about a round trip, and one that contradicts them (the clock was set) starts afresh. When the
bounds include zero the offset is 0, so no conversion adds noise.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass
from datetime import datetime, timedelta
from email.utils import parsedate_to_datetime

KEEP_S = 600.0  # readings older than this no longer count
MAX_READINGS = 64


@dataclass(frozen=True)
class ClockOffset:
    """The ZVM's clock minus ours, in seconds, bounded by ``low_s``..``high_s``."""

    offset_s: float
    low_s: float
    high_s: float
    measured_at: float  # our epoch seconds of the newest reading used

    @property
    def uncertainty_s(self) -> float:
        return (self.high_s - self.low_s) / 2


def date_header_bounds(date_header: str | None, received_at: float, elapsed_s: float) -> tuple[float, float] | None:
    """The offset bounds one answer gives, or None when its ``Date`` header is missing or bad."""
    if not date_header:
        return None
    try:
        server = parsedate_to_datetime(date_header)
    except (TypeError, ValueError, IndexError):
        return None
    if server.tzinfo is None:
        return None  # "-0000" means the zone is unknown; no use for a clock offset
    stamp = server.timestamp()
    sent_at = received_at - max(0.0, elapsed_s)
    return stamp - received_at, stamp + 1.0 - sent_at


def estimate(readings: list[tuple[float, float, float]]) -> ClockOffset | None:
    """The offset from ``(low, high, at)`` readings, newest last: intersected from the newest backwards up to the
    first reading that would leave nothing (the clock was set between them; the newer readings are right)."""
    if not readings:
        return None
    low, high, at = readings[-1]
    for r_low, r_high, _ in reversed(readings[:-1]):
        n_low, n_high = max(low, r_low), min(high, r_high)
        if n_low > n_high:
            break
        low, high = n_low, n_high
    offset = 0.0 if low <= 0.0 <= high else (low + high) / 2
    return ClockOffset(offset_s=offset, low_s=low, high_s=high, measured_at=at)


class ZvmClock:
    """The recent ``Date`` readings of one ZVM; shared by the threads using its client."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._readings: deque[tuple[float, float, float]] = deque(maxlen=MAX_READINGS)

    def observe(self, date_header: str | None, received_at: float, elapsed_s: float) -> None:
        bounds = date_header_bounds(date_header, received_at, elapsed_s)
        if bounds is None:
            return
        with self._lock:
            self._readings.append((bounds[0], bounds[1], received_at))

    def offset(self, now: float | None = None) -> ClockOffset | None:
        cutoff = (time.time() if now is None else now) - KEEP_S
        with self._lock:
            while self._readings and self._readings[0][2] < cutoff:
                self._readings.popleft()
            readings = list(self._readings)
        return estimate(readings)


def to_zvm(ours: datetime, offset_s: float) -> datetime:
    """One of our times as the ZVM's clock reads it."""
    return ours + timedelta(seconds=offset_s)


def from_zvm(theirs: datetime, offset_s: float) -> datetime:
    """A time the ZVM showed, on our clock."""
    return theirs - timedelta(seconds=offset_s)
