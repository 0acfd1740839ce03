"""When a checkpoint leaves its VPG's journal: the estimate, from one VPG's ``HistoryStatusApi`` (docs/guard.md,
"How long a checkpoint can be recovered from").

The journal drops what is older than its history, so a checkpoint taken at ``T`` leaves at about ``T +
history``: the actual history, capped at the configured one, else the earliest checkpoint's age; with neither,
no estimate, since no estimate beats a wrong one (the configured history alone is only the latest it may stay).
It errs early, the safe side for a warning: a journal still filling reaches back less than it will. Whether a
checkpoint has left is not estimated: it has once the journal's earliest checkpoint is younger. No Django, no
ZVM call.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from rewind.zvm import JournalHistory
from rewind.zvm.clock import from_zvm, to_zvm

# The actual history is in whole minutes (rounded down, presumably) and the ZVM refreshes it
# now and then: the journal's reach is known to within about this.
REACH_MARGIN = timedelta(minutes=2)
# Checkpoint times round-trip to the second; a difference below this is the same time.
SAME_TIME = timedelta(seconds=1)


@dataclass(frozen=True)
class JournalForecast:
    """``leaves_at`` (our clock) or None when it cannot be told; ``gone`` when it has certainly left."""

    leaves_at: datetime | None
    history_minutes: int | None
    gone: bool


def journal_depth(history: JournalHistory, now_zvm: datetime) -> timedelta | None:
    """How far back the journal reaches: the actual history, else the earliest checkpoint's age, capped at the
    configured history; None when neither is known."""
    if history.actual_minutes is not None:
        depth = timedelta(minutes=history.actual_minutes)
    elif history.earliest is not None and history.earliest.timestamp is not None:
        depth = max(timedelta(0), now_zvm - history.earliest.timestamp)
    else:
        return None
    if history.configured_minutes is not None:
        depth = min(depth, timedelta(minutes=history.configured_minutes))
    return depth


def journal_is_past(history: JournalHistory, *, checkpoint_id: str, checkpoint_at: datetime, now_zvm: datetime) -> bool:
    """Whether the journal has certainly dropped the checkpoint (times on the ZVM's clock)."""
    earliest = history.earliest
    if earliest is not None and earliest.timestamp is not None:
        if earliest.identifier and earliest.identifier == checkpoint_id:
            return False
        return earliest.timestamp > checkpoint_at + SAME_TIME
    if history.actual_minutes is None:
        return False
    reach = now_zvm - timedelta(minutes=history.actual_minutes)
    return checkpoint_at < reach - REACH_MARGIN


def journal_forecast(
    history: JournalHistory, *, checkpoint_id: str, checkpoint_at: datetime, offset_s: float, now: datetime
) -> JournalForecast:
    """When the checkpoint taken at ``checkpoint_at`` (as the ZVM listed it) leaves the journal; ``offset_s`` is
    that ZVM's clock minus ours. An estimate that passed while the checkpoint is still in the journal "leaves
    now": it never says left unless the ZVM shows it did."""
    now_zvm = to_zvm(now, offset_s)
    gone = journal_is_past(history, checkpoint_id=checkpoint_id, checkpoint_at=checkpoint_at, now_zvm=now_zvm)
    depth = journal_depth(history, now_zvm)
    if depth is None:
        return JournalForecast(leaves_at=None, history_minutes=None, gone=gone)
    leaves_at = from_zvm(checkpoint_at, offset_s) + depth
    leaves_at = min(leaves_at, now) if gone else max(leaves_at, now)
    return JournalForecast(leaves_at=leaves_at, history_minutes=round(depth.total_seconds() / 60), gone=gone)
