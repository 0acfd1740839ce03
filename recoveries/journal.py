"""At run time: has the approved checkpoint left its VPG's journal? Asked of the recovery site's ZVM.

A request may wait an hour for approval, and a journal may keep only an hour: when a checkpoint is not listed or
its mount fails, the agent and the approver read "it left the journal" rather than a ZVM's bare refusal.
"""

from __future__ import annotations

import logging

from django.utils import timezone

from recoveries.models import RecoveryRequest
from rewind.checkpoints.forecast import journal_is_past
from rewind.checkpoints.selectors import journal_estimate_for
from rewind.sites.models import Site
from rewind.zvm import JournalHistory, ZvmClient, ZvmError
from rewind.zvm.clock import to_zvm

logger = logging.getLogger(__name__)


def journal_history_now(client: ZvmClient, vpg_id: str) -> JournalHistory | None:
    """The VPG's HistoryStatusApi, its earliest checkpoint taken from the stats when it lacks one;
    None when the ZVM cannot be asked."""
    try:
        history = client.get_vpg(vpg_id).history
        if history.earliest is None or history.earliest.timestamp is None:
            earliest = client.checkpoint_stats(vpg_id).earliest
            history = JournalHistory(history.actual_minutes, history.configured_minutes, earliest)
    except ZvmError as exc:
        logger.warning("journal of VPG %s: %s", vpg_id, exc)
        return None
    return history


def journal_gone_reason(client: ZvmClient, recovery: RecoveryRequest, site: Site) -> str | None:
    """A sentence saying the checkpoint has left the journal when the ZVM shows it has, else None (also without a
    checkpoint time or an answer). The checkpoint's time is on the recovery site's clock, as the ZVM's."""
    taken = recovery.checkpoint_timestamp
    if taken is None:
        return None
    history = journal_history_now(client, recovery.vpg_identifier)
    if history is None:
        return None
    offset = client.clock_offset()
    now_zvm = to_zvm(timezone.now(), offset.offset_s if offset else 0.0)
    if not journal_is_past(history, checkpoint_id=recovery.checkpoint_identifier, checkpoint_at=taken, now_zvm=now_zvm):
        return None
    text = (
        f"checkpoint {recovery.checkpoint_identifier} of VPG {recovery.vpg_name} (taken {taken:%Y-%m-%d %H:%M} UTC) "
        f"has left the journal on {site.name}"
    )
    estimate = journal_estimate_for(
        vpg_identifier=recovery.vpg_identifier, checkpoint_identifier=recovery.checkpoint_identifier
    )
    if estimate is not None:
        text += f" (it was estimated to leave at about {estimate:%Y-%m-%d %H:%M} UTC)"
    elif history.earliest is not None and history.earliest.timestamp is not None:
        text += f" (its oldest checkpoint is now from {history.earliest.timestamp:%Y-%m-%d %H:%M} UTC)"
    return text + "; no file can be recovered from it any more"
