"""Checkpoints that Zerto listed only after their guard had timed out (docs/guard.md).

The guard stays not ok (the agent was told not to proceed, and that answer must not change under it), but the
checkpoint is a good point to recover from, so this sweep records it on the row (``listed_late_at``). One
listing per VPG per sweep, bounded by ``REWIND_LATE_LISTING_HORIZON_S``; a failed listing records nothing (an
error is never read as "absent"). Each record is a compare-and-swap, so sweeps may overlap.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from rewind.audit import Actor, audit_record
from rewind.audit.actions import GuardAction
from rewind.checkpoints.models import TaggedCheckpoint
from rewind.checkpoints.rows import LIST_LOOKBACK
from rewind.sites import site_client, site_clock_offset_s
from rewind.sites.fanout import for_each_site
from rewind.sites.models import Site
from rewind.zvm import Checkpoint, ZvmError
from rewind.zvm.clock import to_zvm

logger = logging.getLogger(__name__)
# Rows looked at per sweep: a backlog is worked off over a few sweeps, never in one long one.
SWEEP_MAX_ROWS = 2000


@dataclass
class LateReport:
    vpgs_listed: int = 0
    recorded: int = 0
    errors: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        return self.__dict__.copy()


def late_candidates(*, now: datetime | None = None) -> QuerySet[TaggedCheckpoint]:
    """Timed-out rows whose insert was attempted within the horizon and whose checkpoint is not known."""
    now = now or timezone.now()
    horizon = now - timedelta(seconds=settings.REWIND_LATE_LISTING_HORIZON_S)
    return TaggedCheckpoint.objects.filter(
        status=TaggedCheckpoint.Status.TIMED_OUT,
        insert_started_at__gte=horizon,
        checkpoint_identifier="",
        listed_late_at__isnull=True,
        site__enabled=True,
    )


def checkpoints_listed_late_sweep(*, now: datetime | None = None) -> LateReport:
    """The beat's sweep over every candidate row. Safe to overlap."""
    rows = late_candidates(now=now).select_related("guard", "site").order_by("-insert_started_at")[:SWEEP_MAX_ROWS]
    return late_listings_check(rows)


def late_listings_check(rows: Iterable[TaggedCheckpoint]) -> LateReport:
    """Look for the tags of ``rows`` (with guard and site loaded): one listing per VPG, the sites at once, each in
    a thread of its own. Records each one found; ZVM errors are reported per VPG, never raised; a site still
    listing after REWIND_LATE_LISTING_INTERVAL_S is reported and left to finish."""
    report = LateReport()
    sites: dict[int, Site] = {}
    by_vpg: dict[int, dict[str, list[TaggedCheckpoint]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        if row.site is not None and row.insert_started_at is not None:
            sites[row.site.pk] = row.site
            by_vpg[row.site.pk][row.vpg_identifier].append(row)
    parts = {pk: LateReport() for pk in sites}

    def visit(site: Site) -> None:
        for group in by_vpg[site.pk].values():
            _check_vpg(group, parts[site.pk])

    outcomes = for_each_site(
        list(sites.values()), visit, limit_s=settings.REWIND_LATE_LISTING_INTERVAL_S, label="late listings"
    )
    for outcome in outcomes:
        part = parts[outcome.site.pk]
        if outcome.finished:
            report.vpgs_listed += part.vpgs_listed
            report.recorded += part.recorded
            report.errors.update(part.errors)
        if outcome.error:
            report.errors[outcome.site.name] = outcome.error
    return report


def _check_vpg(group: list[TaggedCheckpoint], report: LateReport) -> None:
    """One listing for the rows of one VPG; records each row whose tag it shows."""
    listed = _list(group, report)
    if listed is None:
        return
    by_tag = {(cp.tag or "").strip(): cp for cp in listed if cp.identifier and cp.tag}
    for row in group:
        found = by_tag.get(row.guard.tag.strip())
        if found is not None and _record(row, found):
            report.recorded += 1


def _list(group: list[TaggedCheckpoint], report: LateReport) -> list[Checkpoint] | None:
    first = group[0]
    assert first.site is not None
    since = min(r.insert_started_at for r in group if r.insert_started_at is not None) - LIST_LOOKBACK
    try:
        # startDate on the ZVM's clock, which may run minutes off ours.
        listed = site_client(first.site).list_checkpoints(
            first.vpg_identifier, start=to_zvm(since, site_clock_offset_s(first.site))
        )
    except ZvmError as exc:
        report.errors[f"{first.site.name}/{first.vpg_name}"] = str(exc)
        logger.warning("late listings: VPG %s on %s: %s", first.vpg_name, first.site.name, exc)
        return None
    report.vpgs_listed += 1
    return listed


def _record(row: TaggedCheckpoint, checkpoint: Checkpoint) -> bool:
    """CAS the checkpoint onto the still-timed-out row, audited in the same transaction."""
    now = timezone.now()
    with transaction.atomic():
        won = TaggedCheckpoint.objects.filter(
            pk=row.pk, status=TaggedCheckpoint.Status.TIMED_OUT, checkpoint_identifier="", listed_late_at__isnull=True
        ).update(
            checkpoint_identifier=checkpoint.identifier, checkpoint_timestamp=checkpoint.timestamp, listed_late_at=now
        )
        if not won:
            return False
        late_by = (now - row.insert_started_at).total_seconds() if row.insert_started_at else None
        audit_record(
            actor=Actor.system(),
            action=GuardAction.CHECKPOINT_LISTED_LATE,
            target=row.guard,
            request_id=row.guard.request_id,
            data={
                "vpg": row.vpg_name,
                "vpg_identifier": row.vpg_identifier,
                "tag": row.guard.tag,
                "checkpoint_identifier": checkpoint.identifier,
                "checkpoint_timestamp": checkpoint.timestamp.isoformat() if checkpoint.timestamp else None,
                "seen_s_after_insert": round(late_by, 1) if late_by is not None else None,
                "guard_status": row.guard.status,
            },
        )
    logger.info("guard %s: VPG %s lists checkpoint %s late", row.guard_id, row.vpg_name, checkpoint.identifier)
    return True
