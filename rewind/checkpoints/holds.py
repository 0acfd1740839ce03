"""A guarded change held for a person (``rewind.approvals``): held with its guard's checkpoints, moved on
when the guard ends, and the checkpoints checked again before a release.

The approvals part sits below this one and knows no guard: what it needs of one (ok or not, its
checkpoints) is handed to it from here.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from rewind.approvals.models import HeldCall
from rewind.approvals.services import HoldRequest, held_call_expire, held_call_guard_ended, held_call_open
from rewind.checkpoints.models import ChangeGuard, TaggedCheckpoint
from rewind.sites.models import Site
from rewind.sites.services import site_client
from rewind.zvm import ZvmError

logger = logging.getLogger(__name__)
# The window to find one checkpoint again: its timestamp round-trips to the second (as recoveries do).
WINDOW_S = 2


def guard_checkpoints(guard: ChangeGuard) -> list[dict[str, Any]]:
    """Each VPG's listed checkpoint, as a held call keeps it (and a person reads it)."""
    rows = TaggedCheckpoint.objects.filter(guard=guard).select_related("site").order_by("vpg_name")
    return [
        {
            "vpg": row.vpg_name,
            "vpg_identifier": row.vpg_identifier,
            "site_id": row.site_id,
            "site": row.site.name if row.site else "",
            "checkpoint_identifier": row.checkpoint_identifier or None,
            "checkpoint_time": row.checkpoint_timestamp.isoformat() if row.checkpoint_timestamp else None,
        }
        for row in rows
    ]


def _guard_ok(guard: ChangeGuard) -> bool | None:
    if guard.status == ChangeGuard.Status.OK:
        return True
    if guard.status == ChangeGuard.Status.FAILED:
        return False
    return None


def hold_after_guard(
    *,
    guard: ChangeGuard,
    mode: str,
    tool: str,
    arguments: Mapping[str, Any],
    agent_id: int | None,
    agent_name: str,
    request_id: str = "",
    **gateway: Any,
) -> HeldCall:
    """Hold the call ``guard`` guards (its decision is ``approve``); the same guard and arguments give
    the held call there is. ``gateway``: the gateway's fields (upstream_id, exposed_name, tool_digest, call_id)."""
    guard.refresh_from_db()
    ok = _guard_ok(guard)
    held = held_call_open(
        HoldRequest(
            mode=mode,
            agent_id=agent_id,
            agent_name=agent_name,
            tool=tool,
            arguments=arguments,
            reason=guard.decision_reason or "a person approves this change",
            policy_version=guard.policy_version or 0,
            vm=guard.vm_name,
            vm_identifier=guard.vm_identifier,
            guard_id=guard.pk,
            guard_ok=ok,
            checkpoints=guard_checkpoints(guard) if ok else (),
            change_id=guard.change_id,
            request_id=request_id,
            **gateway,
        )
    )
    if ok is False:
        held_call_guard_ended(held_id=held.pk, ok=False, checkpoints=(), why=guard.error or "failed")
    return held_call_advance(held)


def held_call_advance(held: HeldCall) -> HeldCall:
    """``held`` read afresh, moved on first where it is due: pending once its guard is ok, refused when
    its guard failed, expired past its expiry. Every reader calls it; each move happens once."""
    held.refresh_from_db()
    if held.state == HeldCall.State.GUARDING and held.guard_id is not None:
        guard = ChangeGuard.objects.get(pk=held.guard_id)
        ok = _guard_ok(guard)
        if ok is not None:
            held_call_guard_ended(
                held_id=held.pk,
                ok=ok,
                checkpoints=guard_checkpoints(guard) if ok else (),
                why=guard.error or "failed",
            )
    if held.state in HeldCall.OPEN and held.expires_at <= timezone.now():
        held_call_expire(held_id=held.pk)
    held.refresh_from_db()
    return held


def held_calls_guarding_advance() -> int:
    """The beat's sweep: every held call whose guard ended while nobody read it moves on; returns how many."""
    moved = 0
    for held in HeldCall.objects.filter(state=HeldCall.State.GUARDING).order_by("pk")[:500]:
        before = held.state
        moved += held_call_advance(held).state != before
    return moved


def checkpoints_gone(checkpoints: Sequence[Mapping[str, Any]]) -> str | None:
    """Which checkpoint is no longer listed by its VPG (a resync wipes them), or None when all are.

    One ZVM call per checkpoint, at the site that inserted it. A site that does not answer is a
    refusal too: a release must not go ahead on a checkpoint nobody could confirm.
    """
    for cp in checkpoints:
        ident, when = cp.get("checkpoint_identifier"), cp.get("checkpoint_time")
        site_id = cp.get("site_id")
        site = Site.objects.filter(pk=int(site_id), enabled=True).first() if site_id else None
        what = f"checkpoint {ident} of VPG {cp.get('vpg')}"
        if not ident or site is None:
            return f"{what} cannot be checked: its site is no longer configured here"
        try:
            taken = datetime.fromisoformat(str(when)) if when else None
            start = taken - timedelta(seconds=WINDOW_S) if taken else None
            end = taken + timedelta(seconds=WINDOW_S) if taken else None
            listed = site_client(site).list_checkpoints(str(cp.get("vpg_identifier")), start=start, end=end)
        except ZvmError as exc:
            return f"{what} could not be checked on {site.name}: {exc}"
        if not any(c.identifier == ident for c in listed):
            return (
                f"{what} is no longer listed on {site.name} (a resync wipes every checkpoint, and the journal "
                "drops those older than its history)"
            )
    return None
