"""When a checkpoint leaves its VPG's journal: the estimate, from one VPG's ``HistoryStatusApi``.

A checkpoint can be recovered from only while it is in the journal. The journal keeps a
window of history that slides forward with time: whatever is older than "now minus the
history" is dropped, oldest first. So a checkpoint taken at ``T`` leaves at about
``T + history``, where history is how far back the journal reaches.

What a ZVM tells (``GET /v1/vpgs/{id}``, ``HistoryStatusApi``): ``ActualHistoryInMinutes`` (how
far back the journal reaches now), ``ConfiguredHistoryInMinutes`` (how far it is set to
reach) and ``EarliestCheckpoint`` (the oldest checkpoint it holds). The estimate uses the
actual history, capped at the configured one; without the actual history, the age of the
earliest checkpoint (that is what the actual history is); with neither, there is no estimate.
The configured history alone is not used: it is only the latest the checkpoint can stay, and
a journal short of space keeps less. No estimate is better than a wrong one.

Uncertainty, and which way it errs:

- The actual history comes in whole minutes, and the ZVM's clock may differ from ours (the
  site's measured offset converts it): a minute or two either way.
- The estimate assumes the journal keeps reaching as far back as it does now. A journal that
  is still filling (a new VPG, or one just resynchronised) reaches back less than it will:
  the estimate is early, and moves later with every refresh, up to ``T + configured``. Early
  is the safe side for a warning.
- A journal that runs out of space (a burst of writes against its size limit) drops history
  sooner: the checkpoint leaves earlier than estimated. Refreshes catch up, and the warning
  window (``REWIND_RETENTION_WARN_H``) is the margin for it.

Whether it has already left is not an estimate: the journal drops its oldest checkpoints first,
so once the earliest checkpoint it holds is younger than ours, ours is gone. Without an
earliest checkpoint, a journal whose reach (now less the actual history, less a margin for the
rounding) has passed ours says the same.

No Django and no ZVM call here: the sweep that asks the ZVM is ``rewind.checkpoints.retention``.
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
    """How far back the journal reaches: the actual history, else the earliest checkpoint's age.

    Capped at the configured history (a journal does not keep more than it is set to). None
    when neither is known.
    """
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
    """When the checkpoint taken at ``checkpoint_at`` (as the ZVM listed it) leaves the journal.

    ``offset_s`` is that ZVM's clock minus ours; ``now`` is ours. A checkpoint still in the
    journal whose estimate has passed "leaves now" (the estimate never says it left unless
    the ZVM shows it did); one that left gets the estimated time it left, at the latest now.
    """
    now_zvm = to_zvm(now, offset_s)
    gone = journal_is_past(history, checkpoint_id=checkpoint_id, checkpoint_at=checkpoint_at, now_zvm=now_zvm)
    depth = journal_depth(history, now_zvm)
    if depth is None:
        return JournalForecast(leaves_at=None, history_minutes=None, gone=gone)
    leaves_at = from_zvm(checkpoint_at, offset_s) + depth
    leaves_at = min(leaves_at, now) if gone else max(leaves_at, now)
    return JournalForecast(leaves_at=leaves_at, history_minutes=round(depth.total_seconds() / 60), gone=gone)
