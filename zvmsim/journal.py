"""Checkpoints (per VPG, so both sites' ZVMs list the same ones) and tasks.

Everything that "takes time" is a timestamp compared with now when read, so no background
task runs: a task's State, a tagged checkpoint becoming listed, a mount completing, a
checkpoint ageing out of the journal.

A journal keeps ``history_s`` of history (the VPG's configured journal history): a
checkpoint older than that is gone, from listings, stats and mounts alike. A journal that
started less than ``history_s`` ago (a resync) holds only what it has seen since, so its
actual history grows until it reaches the configured one. A real journal holds a
checkpoint every few seconds; this one holds only the few it was given, so its earliest
listed checkpoint may be younger than its actual history says.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from .guestfs import FsView

# Journal checkpoints that existed before the simulator started (seconds before its epoch).
JOURNAL_AGES = (4 * 3600.0, 3600.0, 900.0, 60.0)
# The journal history a VPG keeps unless told otherwise (Zerto's default: one day).
DEFAULT_HISTORY_S = 24 * 3600.0
# How long the seeded journals have been running: long enough to hold their whole history.
SEEDED_JOURNAL_AGE_S = 30 * 24 * 3600.0


@dataclass
class Checkpoint:
    identifier: str
    timestamp: float
    tag: str | None
    type: int  # 0 journal, 1 tagged (a guess, see zvm-api.md §6)
    # vm identifier (lower) -> captured tree; a VM absent here holds its pristine tree
    captures: dict[str, FsView] = field(default_factory=dict)
    visible_at: float | None = 0.0  # None: never listed

    def visible(self, now: float) -> bool:
        return self.visible_at is not None and now >= self.visible_at


class Journal:
    """The checkpoints of one VPG, oldest first, and how much history it keeps."""

    def __init__(self, checkpoints: list[Checkpoint], *, started_at: float, history_s: float) -> None:
        self.checkpoints = checkpoints
        self.started_at = started_at  # when this journal began (creation or the last resync)
        self.history_s = history_s

    def in_history(self, cp: Checkpoint, now: float) -> bool:
        return cp.timestamp >= now - self.history_s

    def listed(self, now: float, start: float | None = None, end: float | None = None) -> list[Checkpoint]:
        return [
            cp
            for cp in self.checkpoints
            if cp.visible(now)
            and self.in_history(cp, now)
            and (start is None or cp.timestamp >= start)
            and (end is None or cp.timestamp <= end)
        ]

    def get(self, identifier: str, now: float) -> Checkpoint | None:
        for cp in self.checkpoints:
            if cp.identifier == identifier and cp.visible(now) and self.in_history(cp, now):
                return cp
        return None

    def aged_out(self, identifier: str, now: float) -> Checkpoint | None:
        """The checkpoint, when it was listed once and has since left the journal's history."""
        for cp in self.checkpoints:
            if cp.identifier == identifier and cp.visible(now) and not self.in_history(cp, now):
                return cp
        return None

    def actual_history_s(self, now: float) -> float:
        """How far back the journal reaches now: its configured history, or less while it fills."""
        return max(0.0, min(self.history_s, now - self.started_at))


def journal_checkpoints(vpg_index: int, epoch: float) -> list[Checkpoint]:
    base = 100_000 + vpg_index * 10
    return [Checkpoint(str(base + i), epoch - age, None, 0) for i, age in enumerate(JOURNAL_AGES)]


def seeded_journal(vpg_index: int, epoch: float, history_s: float) -> Journal:
    """A VPG's journal as the simulator starts: running for long, so it holds its whole history."""
    return Journal(journal_checkpoints(vpg_index, epoch), started_at=epoch - SEEDED_JOURNAL_AGE_S, history_s=history_s)


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
