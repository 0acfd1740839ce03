"""Simulator settings (from the command line)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .journal import DEFAULT_AUTO_CHECKPOINT_S, DEFAULT_HISTORY_S
from .variants import Variants


@dataclass(frozen=True)
class SimConfig:
    seed: int = 42
    vms: int = 0  # filler VMs on top of the demo inventory
    task_seconds: float = 0.3  # how long an insert task stays InProgress
    mount_seconds: float = 0.3  # MountInProgress -> MountCompletedSuccessfully
    unmount_seconds: float = 0.3  # UnmountInProgress -> gone
    journal_history_s: float = DEFAULT_HISTORY_S  # every VPG's journal history, until /_sim/vpgs/{vpg}/journal
    auto_checkpoint_s: float = DEFAULT_AUTO_CHECKPOINT_S  # an automatic journal checkpoint this often (0: none)
    variants: Variants = field(default_factory=Variants)  # every site's, until /_sim/variants
