"""Request pacing: at most a site's cap of requests to one ZVM in any one-second window (docs/operations.md,
"Politeness to a ZVM").

A request over the cap is never dropped: it reserves the next free slot and waits. A sliding window of reserved
send times, not a GCRA, because it alone lets an idle ZVM take a burst of ``n = max(1, floor(r))`` at once while
no second ever holds more than ``n``. The shared pacers (Redis, database) live outside the client library and
apply the same rule through ``next_slot``.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Protocol

# The ZVM sees arrival times, not our send times: a request delayed on its way (a busy core, a new TLS
# connection) can arrive closer to a later one than their slots were. Widening the window a little keeps the cap
# true at the ZVM's end; why 100 ms: see the benchmarks page.
ARRIVAL_SLACK_S = 0.1
# How far from its slot a sender may find itself and still keep it (``rewind.zvm.transport``): a third of the
# slack, as a pacer may place a slot this far off, the sender be this late, and a third is left for the way.
LATE_S = ARRIVAL_SLACK_S / 3
MAX_PER_S = 1000.0  # the window keeps one time per allowed request; bounded so it stays small


class Pacer(Protocol):
    def reserve(self, key: str, per_s: float) -> float:
        """Count one request to the ZVM ``key``; the seconds from this return to its slot. Negative when the slot
        had already passed (the reservation itself was slow). A pacer that cannot place the slot exactly on this
        process's clock places it no earlier, and at most ``LATE_S`` later."""
        ...


def window_shape(per_s: float) -> tuple[int, float]:
    """``(n, window)``: at most ``n`` requests in any ``window`` seconds."""
    if not 0 < per_s <= MAX_PER_S:
        raise ValueError(f"a request cap must be above 0 and at most {MAX_PER_S:g} per second")
    return max(1, math.floor(per_s)), max(1.0, 1.0 / per_s) + ARRIVAL_SLACK_S


def next_slot(recent: Sequence[float], now: float, n: int, window: float) -> float:
    """The send time of the next request, given the ascending send times ``recent`` already reserved."""
    slot = now
    if len(recent) >= n:
        slot = max(slot, recent[-n] + window)
    if recent:
        slot = max(slot, recent[-1])  # keeps the list ascending, so recent[-n] stays the n-th last
    return slot


class LocalPacer:
    """The rule counted in this process only: used without Django, and while Redis is down."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._recent: dict[tuple[str, float], deque[float]] = {}

    def reserve(self, key: str, per_s: float) -> float:
        n, window = window_shape(per_s)
        with self._lock:
            now = self._clock()
            recent = self._recent.setdefault((key, per_s), deque(maxlen=n))
            slot = next_slot(recent, now, n, window)
            recent.append(slot)
            return max(0.0, slot - now)


LOCAL_PACER = LocalPacer()
