"""The retention forecast: when each tagged checkpoint leaves its VPG's journal, and a warning before
(docs/guard.md).

The beat asks each VPG once, at the site that inserted the checkpoint, each site in a thread of its own so a
stuck ZVM delays no other; it stores the estimate of ``rewind.checkpoints.forecast`` on every row of that VPG,
and warns once per row leaving within ``REWIND_RETENTION_WARN_H``. A ZVM that cannot be asked changes nothing
(an error is never read as "gone"). Every record is a compare-and-swap, so sweeps may overlap.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q, QuerySet
from django.utils import timezone

from rewind.audit import Actor, audit_record
from rewind.audit.actions import GuardAction
from rewind.checkpoints.announce import checkpoint_announce_leaving_journal
from rewind.checkpoints.forecast import JournalForecast, journal_forecast
from rewind.checkpoints.models import TaggedCheckpoint
from rewind.sites import site_client, site_clock_offset_s
from rewind.sites.fanout import for_each_site
from rewind.sites.models import Site
from rewind.zvm import ZvmError

logger = logging.getLogger(__name__)
# Zerto keeps at most 30 days of journal history: an older checkpoint is in no journal.
LONGEST_HISTORY = timedelta(days=31)


@dataclass
class RetentionReport:
    vpgs_asked: int = 0
    estimated: int = 0
    no_estimate: int = 0  # the ZVM's HistoryStatusApi did not say enough
    left_journal: int = 0
    warned: list[int] = field(default_factory=list)  # row ids warned by this sweep
    site_errors: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        return {**self.__dict__, "warned": list(self.warned), "site_errors": dict(self.site_errors)}

    def merge(self, part: RetentionReport) -> None:
        self.vpgs_asked += part.vpgs_asked
        self.estimated += part.estimated
        self.no_estimate += part.no_estimate
        self.left_journal += part.left_journal
        self.site_errors.update(part.site_errors)


def retention_candidates(*, now: datetime | None = None) -> QuerySet[TaggedCheckpoint]:
    """Rows naming a checkpoint Zerto listed (in time or late), not yet seen gone, young enough
    to be in a journal, on an enabled site; never-estimated ones first."""
    now = now or timezone.now()
    return (
        TaggedCheckpoint.objects.filter(
            Q(status=TaggedCheckpoint.Status.LISTED) | Q(listed_late_at__isnull=False),
            checkpoint_timestamp__gte=now - LONGEST_HISTORY,
            left_journal_seen_at__isnull=True,
            site__enabled=True,
        )
        .exclude(checkpoint_identifier="")
        .order_by(F("journal_estimated_at").asc(nulls_first=True), "pk")
    )


def retention_refresh_sweep(*, now: datetime | None = None) -> RetentionReport:
    """Refresh the estimate of every candidate row, the sites at once, each in a thread of its own; a site still at
    work after ``REWIND_RETENTION_INTERVAL_S`` is reported and left to finish. Safe to overlap."""
    now = now or timezone.now()
    report = RetentionReport()
    sites: dict[int, Site] = {}
    by_site: dict[int, list[TaggedCheckpoint]] = defaultdict(list)
    for row in retention_candidates(now=now).select_related("guard", "site"):
        if row.site is not None:
            sites[row.site.pk] = row.site
            by_site[row.site.pk].append(row)
    parts = {pk: RetentionReport() for pk in sites}
    outcomes = for_each_site(
        list(sites.values()),
        lambda site: retention_rows_refresh(by_site[site.pk], now=now, report=parts[site.pk]),
        limit_s=settings.REWIND_RETENTION_INTERVAL_S,
        label="retention",
    )
    for outcome in outcomes:
        if outcome.finished:
            report.merge(parts[outcome.site.pk])
        if outcome.error:
            report.site_errors[outcome.site.name] = outcome.error
    return report


def retention_rows_refresh(
    rows: Iterable[TaggedCheckpoint], *, now: datetime | None = None, report: RetentionReport | None = None
) -> RetentionReport:
    """Estimate ``rows`` (site and guard loaded): one VPG read per (site, VPG). ZVM errors are
    reported, never raised; a row the ZVM's answer says nothing about keeps its last estimate."""
    now = now or timezone.now()
    report = report if report is not None else RetentionReport()
    by_vpg: dict[tuple[int, str], list[TaggedCheckpoint]] = defaultdict(list)
    for row in rows:
        if row.site is not None and row.checkpoint_timestamp is not None and row.checkpoint_identifier:
            by_vpg[(row.site.pk, row.vpg_identifier)].append(row)
    for group in by_vpg.values():
        site = group[0].site
        assert site is not None
        try:
            vpg = site_client(site).get_vpg(group[0].vpg_identifier)
        except ZvmError as exc:
            report.site_errors[f"{site.name}/{group[0].vpg_name}"] = str(exc)
            logger.warning("retention: VPG %s on %s: %s", group[0].vpg_name, site.name, exc)
            continue
        report.vpgs_asked += 1
        offset = site_clock_offset_s(site)
        for row in group:
            assert row.checkpoint_timestamp is not None
            forecast = journal_forecast(
                vpg.history,
                checkpoint_id=row.checkpoint_identifier,
                checkpoint_at=row.checkpoint_timestamp,
                offset_s=offset,
                now=now,
            )
            _record(row, forecast, now, site, report)
    return report


def _record(
    row: TaggedCheckpoint, forecast: JournalForecast, now: datetime, site: Site, report: RetentionReport
) -> None:
    if forecast.leaves_at is None and not forecast.gone:
        report.no_estimate += 1
        return
    fields: dict[str, object] = {"journal_estimated_at": now}
    if forecast.leaves_at is not None:
        fields.update(leaves_journal_at=forecast.leaves_at, journal_history_minutes=forecast.history_minutes)
        report.estimated += 1
    if not forecast.gone:
        TaggedCheckpoint.objects.filter(pk=row.pk, left_journal_seen_at__isnull=True).update(**fields)
        return
    with transaction.atomic():
        won = TaggedCheckpoint.objects.filter(pk=row.pk, left_journal_seen_at__isnull=True).update(
            left_journal_seen_at=now, **fields
        )
        if won:
            audit_record(
                actor=Actor.system(),
                action=GuardAction.CHECKPOINT_LEFT_JOURNAL,
                target=row.guard,
                request_id=row.guard.request_id,
                data={
                    **row.audit_data(),
                    "site": site.name,
                    "left_at_about": _iso(forecast.leaves_at),
                    "seen_at": now.isoformat(),
                },
            )
    if won:
        report.left_journal += 1


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def retention_recheck_due(rows: Iterable[TaggedCheckpoint], *, now: datetime | None = None) -> None:
    """Ask again, now, about the rows whose estimate says they have left (or are leaving) but
    that no ZVM has shown gone yet: a recovery request decides on them. Errors are only logged."""
    now = now or timezone.now()
    due = [
        r
        for r in rows
        if r.left_journal_seen_at is None and r.leaves_journal_at is not None and r.leaves_journal_at <= now
    ]
    if due:
        retention_rows_refresh(due, now=now)


def retention_warnings_sweep(*, now: datetime | None = None) -> list[TaggedCheckpoint]:
    """Warn once for every row whose checkpoint leaves the journal within ``REWIND_RETENTION_WARN_H`` (0: none);
    the rows this call warned."""
    hours = settings.REWIND_RETENTION_WARN_H
    if hours <= 0:
        return []
    now = now or timezone.now()
    rows = TaggedCheckpoint.objects.filter(
        retention_warned_at__isnull=True,
        left_journal_seen_at__isnull=True,
        leaves_journal_at__isnull=False,
        leaves_journal_at__lte=now + timedelta(hours=hours),
    ).select_related("guard", "site")
    return [row for row in rows if retention_warning_record(row=row, now=now)]


def retention_warning_record(*, row: TaggedCheckpoint, now: datetime | None = None) -> bool:
    """Record, once per row, that its checkpoint is about to leave the journal; False when it was warned already.
    The one place a retention warning happens: a compare-and-swap on ``retention_warned_at`` and its audit event
    in one transaction; whoever else should hear of it is told after the commit."""
    now = now or timezone.now()
    with transaction.atomic():
        won = TaggedCheckpoint.objects.filter(pk=row.pk, retention_warned_at__isnull=True).update(
            retention_warned_at=now
        )
        if not won:
            return False
        left = row.leaves_journal_at - now if row.leaves_journal_at else None
        audit_record(
            actor=Actor.system(),
            action=GuardAction.CHECKPOINT_RETENTION_WARNING,
            target=row.guard,
            request_id=row.guard.request_id,
            data={
                **row.audit_data(),
                "vm": row.guard.vm_name,
                "change_id": row.guard.change_id,
                "leaves_journal_at": _iso(row.leaves_journal_at),
                "hours_left": round(left.total_seconds() / 3600, 1) if left is not None else None,
                "journal_history_minutes": row.journal_history_minutes,
                "warn_hours": settings.REWIND_RETENTION_WARN_H,
            },
        )
        checkpoint_announce_leaving_journal(row=row)
    row.retention_warned_at = now
    logger.info(
        "guard %s: the checkpoint on VPG %s leaves the journal at about %s",
        row.guard_id,
        row.vpg_name,
        _iso(row.leaves_journal_at),
    )
    return True


def left_journal_text(row: TaggedCheckpoint) -> str:
    """A row seen gone, in words: when it left (estimated), or by when it was seen gone."""
    if row.leaves_journal_at is not None:
        return f"left the journal of VPG {row.vpg_name} at about {row.leaves_journal_at:%Y-%m-%d %H:%M} UTC"
    seen = row.left_journal_seen_at
    return f"had left the journal of VPG {row.vpg_name} by {seen:%Y-%m-%d %H:%M} UTC" if seen else ""
