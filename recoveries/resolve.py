"""Binding a recovery request to exactly one VM, VPG and checkpoint, before it is recorded (docs/recovery.md,
"Asking for a file").

FLR runs at a VPG's recovery site, so only VPGs whose recovery site's ZVM is configured here qualify. Among
several, a healthy recovery site comes first (the mount most likely to work; a site with a recent error is only
a worse choice, never refused), then the newest guarded change (one change's checkpoints tie, so the choice does
not hang on which insert landed last), then the VPG name, so the choice is stable. A checkpoint only a ZVM shows
gone from its journal is left out. The bound time is the one the recovery site's ZVM shows, converted through
both sites' clock offsets, since either may run minutes off ours.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from django.db.models import QuerySet

from recoveries.models import RecoveryRequest
from recoveries.undo import MIN_MARGIN_S, SEARCH_BACK, Moment
from rewind.agents.limits import VmLimit
from rewind.checkpoints.late import late_candidates, late_listings_check
from rewind.checkpoints.models import ChangeGuard, TaggedCheckpoint
from rewind.checkpoints.retention import left_journal_text, retention_recheck_due
from rewind.lib.errors import ApplicationError, NotFoundError
from rewind.protection import Protection, VpgProtection, find_protection
from rewind.protection.within_limit import check_within
from rewind.sites import site_circuit, site_client, site_clock_offset_s
from rewind.sites.models import Site
from rewind.zvm import ZvmClient, ZvmError
from rewind.zvm.clock import ClockOffset, from_zvm, to_zvm
from rewind.zvm.types import Checkpoint

Source = RecoveryRequest.CheckpointSource

NO_LIMIT = VmLimit()


@dataclass(frozen=True)
class BoundCheckpoint:
    vm_identifier: str
    vm_name: str
    vpg_identifier: str
    vpg_name: str
    recovery_site_identifier: str
    recovery_site_name: str
    checkpoint_identifier: str
    checkpoint_timestamp: datetime | None
    tag: str
    change_id: str
    source: str
    listed_late_at: datetime | None = None  # the guard timed out; Zerto listed the checkpoint after
    before_by_s: float | None = None  # an undo: how far before the moment the checkpoint lies


def bind_checkpoint(
    *,
    vm: str,
    checkpoint: str | None = None,
    change_id: str | None = None,
    before: Moment | None = None,
    limit: VmLimit = NO_LIMIT,
    agent_name: str = "",
) -> BoundCheckpoint:
    """Resolve the VM and the one checkpoint to mount; ``ApplicationError`` with the reason. ``before``: an undo,
    the newest journal checkpoint strictly before that moment. May call the ZVMs; holds no transaction."""
    protection = find_protection(vm)
    check_within(limit, protection, agent_name=agent_name)  # before any checkpoint is looked up
    usable = _usable_vpgs(protection)
    if before is not None:
        if (checkpoint or "").strip() or (change_id or "").strip():
            raise ApplicationError("name the checkpoint one way: change_id, checkpoint, before_call or point_in_time")
        return _before_moment(protection, usable, before)
    checkpoint = (checkpoint or "").strip() or None
    change_id = (change_id or "").strip() or None
    if change_id:
        guard = ChangeGuard.objects.filter(vm_identifier=protection.vm_identifier, change_id=change_id).first()
        if guard is None:
            raise NotFoundError(f"no guarded change {change_id!r} is recorded for VM {protection.vm_name}")
        _look_again_for_late(guard.vpgs.all())
        return _from_guard_rows(protection, usable, guard.vpgs.all(), Source.CHANGE_ID, f"change {change_id!r}")
    if checkpoint:
        rows = TaggedCheckpoint.objects.filter(guard__vm_identifier=protection.vm_identifier, guard__tag=checkpoint)
        if rows.exists():
            _look_again_for_late(rows)
            return _from_guard_rows(protection, usable, rows, Source.TAG, f"tag {checkpoint!r}")
        return _from_checkpoint_id(protection, usable, checkpoint)
    rows = TaggedCheckpoint.objects.filter(guard__vm_identifier=protection.vm_identifier).order_by(
        "-checkpoint_timestamp"
    )
    _look_again_for_late(rows)
    return _from_guard_rows(
        protection, usable, rows, Source.LATEST_TAGGED, "any tagged checkpoint made by this service"
    )


def _look_again_for_late(rows: QuerySet[TaggedCheckpoint]) -> None:
    """Record the late listings among ``rows`` now (one listing per VPG; errors only logged)."""
    candidates = late_candidates().filter(pk__in=rows.values("pk")).select_related("guard", "site")
    if candidates.exists():
        late_listings_check(candidates)


def _usable_row(row: TaggedCheckpoint) -> bool:
    """The row names a checkpoint Zerto listed: in time, or after the guard timed out."""
    if not row.checkpoint_identifier:
        return False
    return row.status == TaggedCheckpoint.Status.LISTED or row.listed_late_at is not None


def _usable_vpgs(protection: Protection) -> dict[str, VpgProtection]:
    """VPGs whose recovery site's ZVM is configured (and enabled) here, by identifier."""
    usable = {v.identifier: v for v in protection.vpgs if v.recovery_site.configured}
    if not usable:
        names = ", ".join(
            f"{v.name} (recovery site {v.recovery_site.name or v.recovery_site.identifier})" for v in protection.vpgs
        )
        raise ApplicationError(
            f"VM {protection.vm_name} cannot be recovered here: no ZVM is configured for the recovery site of "
            f"any VPG protecting it: {names}"
        )
    return usable


def _healthy_site_pks(vpgs: Iterable[VpgProtection]) -> set[int]:
    """Recovery sites configured here, enabled, whose last identity check succeeded and whose circuit is closed:
    read from the database and the circuits, not the cached look-up, so a site disabled or failing a moment ago
    loses the preference at once."""
    pks = {v.recovery_site.site_pk for v in vpgs if v.recovery_site.site_pk is not None}
    sites = Site.objects.filter(pk__in=pks, enabled=True, last_error="")
    return {site.pk for site in sites if not site_circuit(site).is_open}


def _preference(vpg: VpgProtection, healthy: set[int], requested_at: datetime | None = None) -> tuple[bool, float, str]:
    """Sort key, smallest first: healthy recovery site, then newest change, then VPG name."""
    newest_first = -requested_at.timestamp() if requested_at is not None else 0.0
    return (vpg.recovery_site.site_pk not in healthy, newest_first, (vpg.name or "").lower())


def _bound(
    protection: Protection,
    vpg: VpgProtection,
    cp_id: str,
    when: datetime | None,
    tag: str,
    change_id: str,
    source: str,
    listed_late_at: datetime | None = None,
) -> BoundCheckpoint:
    return BoundCheckpoint(
        vm_identifier=protection.vm_identifier,
        vm_name=protection.vm_name or protection.vm_identifier,
        vpg_identifier=vpg.identifier,
        vpg_name=vpg.name or vpg.identifier,
        recovery_site_identifier=vpg.recovery_site.identifier or "",
        recovery_site_name=vpg.recovery_site.name or "",
        checkpoint_identifier=cp_id,
        checkpoint_timestamp=when,
        tag=tag,
        change_id=change_id,
        source=source,
        listed_late_at=listed_late_at,
    )


def _from_guard_rows(
    protection: Protection, usable: dict[str, VpgProtection], rows: QuerySet[TaggedCheckpoint], source: str, what: str
) -> BoundCheckpoint:
    listed = [r for r in rows.select_related("guard", "site") if _usable_row(r)]
    if not listed:
        raise NotFoundError(f"no listed tagged checkpoint matches {what} for VM {protection.vm_name}")
    here = [r for r in listed if r.vpg_identifier in usable]
    if not here:
        vpgs = ", ".join(
            sorted(
                {f"{r.vpg_name} (recovery site {r.recovery_site_name or r.recovery_site_identifier})" for r in listed}
            )
        )
        raise ApplicationError(
            f"the checkpoint of {what} for VM {protection.vm_name} lies only on VPGs whose recovery site's ZVM "
            f"is not configured here: {vpgs}"
        )
    here = _in_journal(here, protection, what)
    healthy = _healthy_site_pks(usable.values())
    row = min(here, key=lambda r: _preference(usable[r.vpg_identifier], healthy, r.guard.requested_at))
    vpg = usable[row.vpg_identifier]
    when = _on_recovery_clock(row.checkpoint_timestamp, row.site, vpg)
    return _bound(
        protection, vpg, row.checkpoint_identifier, when, row.guard.tag, row.guard.change_id, source, row.listed_late_at
    )


def _in_journal(rows: list[TaggedCheckpoint], protection: Protection, what: str) -> list[TaggedCheckpoint]:
    """The rows whose checkpoint may still be in its VPG's journal; refused when none is. Rows whose estimate has
    passed are asked about once more now; only a ZVM showing the journal past a checkpoint rules it out, as the
    run checks the checkpoint again before it mounts."""
    retention_recheck_due(rows)
    for row in rows:
        row.refresh_from_db(fields=["leaves_journal_at", "left_journal_seen_at", "journal_history_minutes"])
    remaining = [r for r in rows if r.left_journal_seen_at is None]
    if remaining:
        return remaining
    gone = "; ".join(sorted(left_journal_text(r) for r in rows))
    raise ApplicationError(
        f"the checkpoint of {what} for VM {protection.vm_name} can no longer be recovered: it {gone}. "
        "Nothing was requested; name a newer checkpoint (a later change_id or tag), or leave both out for the newest."
    )


def _on_recovery_clock(when: datetime | None, protected: Site | None, vpg: VpgProtection) -> datetime | None:
    """A checkpoint time as the protected site's ZVM listed it, as the recovery site's ZVM shows it (the run looks
    it up there by a window around this time). Shifted by whole seconds: the offsets come from answers dated to
    the second, and a fraction the ZVM never listed would be shown as if it had."""
    if when is None:
        return None
    pk = vpg.recovery_site.site_pk
    recovery = Site.objects.filter(pk=pk).first() if pk is not None else None
    shift = to_zvm(from_zvm(when, site_clock_offset_s(protected)), site_clock_offset_s(recovery)) - when
    return when + timedelta(seconds=round(shift.total_seconds()))


def _from_checkpoint_id(
    protection: Protection, usable: dict[str, VpgProtection], checkpoint_id: str
) -> BoundCheckpoint:
    """A bare checkpoint identifier: ask each candidate VPG's recovery site for it."""
    problems: list[str] = []
    healthy = _healthy_site_pks(usable.values())
    for vpg in sorted(usable.values(), key=lambda v: _preference(v, healthy)):
        site_pk = vpg.recovery_site.site_pk
        site = Site.objects.filter(pk=site_pk, enabled=True).first() if site_pk is not None else None
        if site is None:
            continue
        try:
            points = site_client(site).points_in_time(protection.vm_identifier, vpg_id=vpg.identifier)
        except ZvmError as exc:
            problems.append(str(exc))
            continue
        for point in points:
            cp = point.checkpoint
            if cp is not None and cp.identifier == checkpoint_id:
                return _bound(protection, vpg, checkpoint_id, cp.timestamp, cp.tag or "", "", Source.CHECKPOINT_ID)
    detail = f" ({'; '.join(problems)})" if problems else ""
    raise NotFoundError(
        f"{checkpoint_id!r} is neither a tag this service made nor a checkpoint listed for VM "
        f"{protection.vm_name} on a VPG recoverable here{detail}"
    )


def _margin_s(offset: ClockOffset | None) -> float:
    return max(MIN_MARGIN_S, offset.uncertainty_s if offset is not None else 0.0)


def _limit(moment: Moment, client: ZvmClient, site: Site) -> datetime:
    """The moment on the site's clock, less the margin: a checkpoint must be strictly before it."""
    offset = client.clock_offset()
    offset_s = offset.offset_s if offset is not None else site_clock_offset_s(site)
    return to_zvm(moment.at, offset_s) - timedelta(seconds=_margin_s(offset))


def _newest_before(client: ZvmClient, site: Site, vpg_id: str, moment: Moment) -> tuple[Checkpoint | None, datetime]:
    limit = _limit(moment, client, site)
    listed = client.list_checkpoints(vpg_id, start=limit - SEARCH_BACK, end=limit + timedelta(seconds=5))
    limit = _limit(moment, client, site)  # the listing's answer measured the clock again
    before = [c for c in listed if c.identifier and c.timestamp is not None and c.timestamp < limit]
    if not before:  # nothing in the last hour before it: the whole journal up to it
        listed = client.list_checkpoints(vpg_id, end=limit)
        before = [c for c in listed if c.identifier and c.timestamp is not None and c.timestamp < limit]
    return (max(before, key=lambda c: c.timestamp or limit) if before else None), limit


def _before_moment(protection: Protection, usable: dict[str, VpgProtection], moment: Moment) -> BoundCheckpoint:
    """The newest journal checkpoint strictly before ``moment``, on a VPG recoverable here."""
    problems: list[str] = []
    healthy = _healthy_site_pks(usable.values())
    for vpg in sorted(usable.values(), key=lambda v: _preference(v, healthy)):
        site_pk = vpg.recovery_site.site_pk
        site = Site.objects.filter(pk=site_pk, enabled=True).first() if site_pk is not None else None
        if site is None:
            continue
        client = site_client(site)
        try:
            found, limit = _newest_before(client, site, vpg.identifier, moment)
            if found is None:
                earliest = client.checkpoint_stats(vpg.identifier).earliest
                oldest = f"{earliest.timestamp:%Y-%m-%d %H:%M:%S} UTC" if earliest and earliest.timestamp else "unknown"
                problems.append(
                    f"the journal of VPG {vpg.name} holds no checkpoint before {moment.described}: the moment is "
                    f"older than the journal (its oldest checkpoint is from {oldest} on {site.name}'s clock)"
                )
                continue
        except ZvmError as exc:
            problems.append(f"VPG {vpg.name} on {site.name}: {exc}")
            continue
        assert found.identifier is not None
        assert found.timestamp is not None
        by_s = (limit - found.timestamp).total_seconds() + _margin_s(client.clock_offset())
        return replace(
            _bound(protection, vpg, found.identifier, found.timestamp, found.tag or "", "", _source_of(moment)),
            before_by_s=round(by_s, 3),
        )
    raise ApplicationError(
        f"no checkpoint before {moment.described} can be recovered for VM {protection.vm_name}: " + "; ".join(problems)
    )


def _source_of(moment: Moment) -> str:
    return Source.BEFORE_CALL if moment.call_id else Source.POINT_IN_TIME


def checkpoint_window(when: datetime) -> tuple[datetime, datetime]:
    """The startDate/endDate to find one checkpoint again: timestamps round-trip to the second."""
    return when - timedelta(seconds=2), when + timedelta(seconds=2)
