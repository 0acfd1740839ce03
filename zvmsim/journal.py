"""Checkpoints (per VPG, so both sites' ZVMs list the same ones) and tasks.

Everything that "takes time" is a timestamp compared with now when read, so no background
task runs: a task's State, a tagged checkpoint becoming listed, a mount completing, a
checkpoint ageing out of the journal.

A journal keeps ``history_s`` of history (the VPG's configured journal history): a
checkpoint older than that is gone, from listings, stats and mounts alike. A journal that
started less than ``history_s`` ago (a resync) holds only what it has seen since, so its
actual history grows until it reaches the configured one.

Like a real journal, it holds an automatic checkpoint (type 0, untagged) every few seconds
(``--auto-checkpoint-s``, per VPG through ``/_sim/vpgs/{vpg}/journal``), from the moment the
simulator started (or the journal was resynced) on; before that, the seeded checkpoints stand
for its past, so a seeded journal's earliest listed checkpoint may be younger than its actual
history says. Automatic checkpoints are computed from the interval when read; each holds the
guest trees as they were at its time because the world seals the pending ones (one shared
capture) just before it changes a guest file.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from .guestfs import FsView

# Journal checkpoints that existed before the simulator started (seconds before its epoch).
JOURNAL_AGES = (4 * 3600.0, 3600.0, 900.0, 60.0)
# The journal history a VPG keeps unless told otherwise (Zerto's default: one day).
DEFAULT_HISTORY_S = 24 * 3600.0
# An automatic journal checkpoint every this many seconds, unless told otherwise (0: none).
DEFAULT_AUTO_CHECKPOINT_S = 5.0
# The shortest interval accepted (ids carry the time in milliseconds).
MIN_AUTO_CHECKPOINT_S = 0.1
# How long the seeded journals have been running: long enough to hold their whole history.
SEEDED_JOURNAL_AGE_S = 30 * 24 * 3600.0


@dataclass
class Checkpoint:
    identifier: str
    timestamp: float
    tag: str | None
    type: int  # 0 journal, 1 tagged (a guess: the API documentation does not say)
    # vm identifier (lower) -> captured tree; a VM absent here holds its pristine tree
    captures: dict[str, FsView] = field(default_factory=dict)
    visible_at: float | None = 0.0  # None: never listed

    def visible(self, now: float) -> bool:
        return self.visible_at is not None and now >= self.visible_at


@dataclass
class AutoRun:
    """Automatic checkpoints at ``anchor + k * interval`` for ``first <= k <= last``, all holding
    one capture: nothing in the guests changed between them."""

    anchor: float
    interval: float
    first: int
    last: int  # may be below first: an empty run (the pending one before its first slot)
    captures: dict[str, FsView] | None  # None: pending, the live trees (nothing changed yet)

    def time(self, k: int) -> float:
        return self.anchor + k * self.interval

    def clip(self, lo: float, hi: float) -> tuple[int, int]:
        """The slots of this run whose time lies in [lo, hi] (an empty range when k_lo > k_hi)."""
        k_lo = max(self.first, math.ceil((lo - self.anchor) / self.interval))
        while k_lo > self.first and self.time(k_lo - 1) >= lo:
            k_lo -= 1
        while self.time(k_lo) < lo:
            k_lo += 1
        k_hi = min(self.last, math.floor((hi - self.anchor) / self.interval))
        while k_hi < self.last and self.time(k_hi + 1) <= hi:
            k_hi += 1
        while k_hi >= k_lo and self.time(k_hi) > hi:
            k_hi -= 1
        return k_lo, k_hi


class Journal:
    """The checkpoints of one VPG, oldest first, and how much history it keeps.

    Besides the checkpoints it was given (seeded and tagged), it holds an automatic journal
    checkpoint (type 0, untagged) every ``auto_interval_s`` from ``auto_anchor``, as a real
    journal does every few seconds. Those cost nothing until read: a listing computes them
    from the interval; :meth:`seal` (called just before any guest change) closes the pending
    ones into one :class:`AutoRun` sharing one capture of the trees they hold, so memory grows
    with the number of changes, not with time.
    """

    def __init__(
        self,
        checkpoints: list[Checkpoint],
        *,
        started_at: float,
        history_s: float,
        vpg_index: int = 0,
        auto_interval_s: float = 0.0,
        auto_anchor: float | None = None,
    ) -> None:
        self.checkpoints = checkpoints
        self.started_at = started_at  # when this journal began (creation or the last resync)
        self.history_s = history_s
        self.vpg_index = vpg_index
        self.auto_runs: list[AutoRun] = []  # sealed, oldest first
        self.auto_interval_s = 0.0
        self.auto_anchor = started_at if auto_anchor is None else auto_anchor
        self.auto_next = 1  # the first slot not sealed yet
        if auto_interval_s > 0:
            self.auto_interval_s = auto_interval_s

    # ---- automatic checkpoints ------------------------------------------------------------
    def _pending(self, now: float) -> AutoRun | None:
        """The automatic checkpoints taken since the last seal (live trees), or None when off."""
        if self.auto_interval_s <= 0:
            return None
        last = math.floor((now - self.auto_anchor) / self.auto_interval_s)
        while self.auto_anchor + (last + 1) * self.auto_interval_s <= now:
            last += 1
        while last >= self.auto_next and self.auto_anchor + last * self.auto_interval_s > now:
            last -= 1
        return AutoRun(self.auto_anchor, self.auto_interval_s, self.auto_next, last, None)

    def seal(self, now: float, capture: Callable[[], dict[str, FsView]]) -> None:
        """Fix the automatic checkpoints up to ``now`` to the trees as they are (call it before a
        guest change); ``capture`` runs only when some are pending."""
        pending = self._pending(now)
        if pending is None or pending.last < pending.first:
            return
        pending.captures = capture()
        self.auto_runs.append(pending)
        self.auto_next = pending.last + 1

    def set_auto_interval(self, interval_s: float, now: float, capture: Callable[[], dict[str, FsView]]) -> None:
        """Take an automatic checkpoint every ``interval_s`` from now on (0: none)."""
        self.seal(now, capture)
        self.auto_interval_s = max(0.0, interval_s)
        self.auto_anchor = now
        self.auto_next = 1

    def _auto_id(self, timestamp: float) -> str:
        # The time in ms, then the VPG: unique in the simulator, and above every other id.
        return f"{round(timestamp * 1000)}{self.vpg_index:05d}"

    def _auto_checkpoint(self, run: AutoRun, k: int) -> Checkpoint:
        ts = run.time(k)
        return Checkpoint(self._auto_id(ts), ts, None, 0, run.captures or {}, 0.0)

    def _auto_runs(self, now: float) -> list[AutoRun]:
        pending = self._pending(now)
        return [*self.auto_runs, pending] if pending is not None else self.auto_runs

    def _auto_listed(self, now: float, start: float | None, end: float | None) -> list[Checkpoint]:
        lo = max(now - self.history_s, start if start is not None else -math.inf)
        hi = min(now, end if end is not None else math.inf)
        out: list[Checkpoint] = []
        for run in self._auto_runs(now):
            if run.last < run.first or run.time(run.last) < lo or run.time(run.first) > hi:
                continue
            k_lo, k_hi = run.clip(lo, hi)
            out.extend(self._auto_checkpoint(run, k) for k in range(k_lo, k_hi + 1))
        return out

    def _auto_find(self, identifier: str, now: float) -> Checkpoint | None:
        """The automatic checkpoint with this id, listed or aged out (pending ones too)."""
        head, tail = identifier[:-5], identifier[-5:]
        if not head.isdigit() or not tail.isdigit() or int(tail) != self.vpg_index:
            return None
        ms = int(head)
        for run in self._auto_runs(now):
            k = round((ms / 1000 - run.anchor) / run.interval)
            if run.first <= k <= run.last and round(run.time(k) * 1000) == ms:
                return self._auto_checkpoint(run, k)
        return None

    # ---- every checkpoint -----------------------------------------------------------------
    def in_history(self, cp: Checkpoint, now: float) -> bool:
        return cp.timestamp >= now - self.history_s

    def listed(self, now: float, start: float | None = None, end: float | None = None) -> list[Checkpoint]:
        given = [
            cp
            for cp in self.checkpoints
            if cp.visible(now)
            and self.in_history(cp, now)
            and (start is None or cp.timestamp >= start)
            and (end is None or cp.timestamp <= end)
        ]
        auto = self._auto_listed(now, start, end)
        return sorted(given + auto, key=lambda cp: cp.timestamp) if auto else given

    def earliest(self, now: float) -> Checkpoint | None:
        """The oldest listed checkpoint, without listing every automatic one."""
        given = next((cp for cp in self.checkpoints if cp.visible(now) and self.in_history(cp, now)), None)
        lo = now - self.history_s
        auto = None
        for run in self._auto_runs(now):
            if run.last >= run.first and run.time(run.last) >= lo:
                k_lo, k_hi = run.clip(lo, now)
                if k_lo <= k_hi:
                    auto = self._auto_checkpoint(run, k_lo)
                    break
        found = [cp for cp in (given, auto) if cp is not None]
        return min(found, key=lambda cp: cp.timestamp) if found else None

    def get(self, identifier: str, now: float) -> Checkpoint | None:
        for cp in self.checkpoints:
            if cp.identifier == identifier and cp.visible(now) and self.in_history(cp, now):
                return cp
        auto = self._auto_find(identifier, now)
        return auto if auto is not None and self.in_history(auto, now) else None

    def aged_out(self, identifier: str, now: float) -> Checkpoint | None:
        """The checkpoint, when it was listed once and has since left the journal's history."""
        for cp in self.checkpoints:
            if cp.identifier == identifier and cp.visible(now) and not self.in_history(cp, now):
                return cp
        auto = self._auto_find(identifier, now)
        return auto if auto is not None and not self.in_history(auto, now) else None

    def actual_history_s(self, now: float) -> float:
        """How far back the journal reaches now: its configured history, or less while it fills."""
        return max(0.0, min(self.history_s, now - self.started_at))


def journal_checkpoints(vpg_index: int, epoch: float) -> list[Checkpoint]:
    base = 100_000 + vpg_index * 10
    return [Checkpoint(str(base + i), epoch - age, None, 0) for i, age in enumerate(JOURNAL_AGES)]


def seeded_journal(
    vpg_index: int, epoch: float, history_s: float, auto_interval_s: float = 0.0, auto_anchor: float | None = None
) -> Journal:
    """A VPG's journal as the simulator starts: running for long, so it holds its whole history.
    Its automatic checkpoints start at ``auto_anchor`` (the epoch): before it, the seeded ones
    stand for the journal's past."""
    return Journal(
        journal_checkpoints(vpg_index, epoch),
        started_at=epoch - SEEDED_JOURNAL_AGE_S,
        history_s=history_s,
        vpg_index=vpg_index,
        auto_interval_s=auto_interval_s,
        auto_anchor=epoch if auto_anchor is None else auto_anchor,
    )


class CheckpointIds:
    """Ids of checkpoints inserted while running; above every journal id, increasing."""

    def __init__(self) -> None:
        self._next = itertools.count(50_000_000)

    def next(self) -> str:
        return str(next(self._next))


@dataclass
class Task:
    identifier: str
    type: str
    site: str  # slug of the ZVM that owns the task
    started: float
    done_at: float | None  # None: never ends by itself
    fail_message: str | None = None
    vpg_id: str | None = None
    flr_session_id: str | None = None
    generation: int = 0

    def state(self, now: float) -> tuple[int, int, float | None]:
        """(State, Progress, Completed) at `now`: 1 InProgress, 4 Failed, 6 Completed."""
        if self.done_at is not None and now >= self.done_at:
            return (4, 100, self.done_at) if self.fail_message else (6, 100, self.done_at)
        if self.done_at is None or self.done_at <= self.started:
            return 1, 0, None
        progress = int(99 * (now - self.started) / (self.done_at - self.started))
        return 1, max(0, min(99, progress)), None
