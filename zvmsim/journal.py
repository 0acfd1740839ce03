"""Checkpoints (per VPG, so both sites' ZVMs list the same ones) and tasks.

Everything that "takes time" is a timestamp compared with now when read, so no background
task runs: a task's State, a tagged checkpoint becoming listed, a mount completing.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from .guestfs import FsView

# Journal checkpoints that existed before the simulator started (seconds before its epoch).
JOURNAL_AGES = (4 * 3600.0, 3600.0, 900.0, 60.0)


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
    """The checkpoints of one VPG, oldest first."""

    def __init__(self, checkpoints: list[Checkpoint]) -> None:
        self.checkpoints = checkpoints

    def listed(self, now: float, start: float | None = None, end: float | None = None) -> list[Checkpoint]:
        return [
            cp
            for cp in self.checkpoints
            if cp.visible(now) and (start is None or cp.timestamp >= start) and (end is None or cp.timestamp <= end)
        ]

    def get(self, identifier: str, now: float) -> Checkpoint | None:
        for cp in self.checkpoints:
            if cp.identifier == identifier and cp.visible(now):
                return cp
        return None


def journal_checkpoints(vpg_index: int, epoch: float) -> list[Checkpoint]:
    base = 100_000 + vpg_index * 10
    return [Checkpoint(str(base + i), epoch - age, None, 0) for i, age in enumerate(JOURNAL_AGES)]


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
