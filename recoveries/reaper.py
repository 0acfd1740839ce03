"""The orphan reaper: no FLR mount this service opened stays up (docs/recovery.md, "The reaper").

One ``GET /v1/flrs`` per enabled site says which of our sessions are there: those vanished are marked ended,
those whose recovery is over or overdue unmounted, and a mount whose id was never learned found again and
unmounted. A listing that fails says nothing (the site is skipped); several sessions that fit are left
untouched; a session this service did not record is never touched. A mount that no session fits is ended only
after ``UNKNOWN_SETTLE``, since the ZVM may still be creating it. Every step is a compare-and-swap: sweeps may
overlap.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from recoveries.flr_listing import flr_listing_record
from recoveries.flr_sessions import fitting_sessions, session_end_unseen, session_mark_vanished, session_unmount
from recoveries.models import FlrSession, ReaperSweep, RecoveryRequest
from recoveries.services import recovery_requests_expire_stale, recovery_results_purge_expired
from rewind.audit import SYSTEM, audit_record
from rewind.audit.actions import RecoveryAction
from rewind.lib.concurrency import run_each
from rewind.lib.dbclock import database_now
from rewind.sites import site_client
from rewind.sites.fanout import for_each_site
from rewind.sites.models import Site
from rewind.zvm import FlrSession as ZvmFlrSession
from rewind.zvm import ZvmClient

logger = logging.getLogger(__name__)
S = FlrSession.Status
UNMOUNT_THREADS = 8
# A row still "mounting" without an id this long after it was recorded lost its runner.
MOUNT_CALL_GRACE = timedelta(minutes=2)
# How long after the mount call's answer (at most the read timeout after the row was
# recorded) a session the ZVM was still creating may take to be listed.
UNKNOWN_SETTLE = timedelta(minutes=2)
# Sweeps run every few minutes; a week of them says when it last ran and when it last acted.
SWEEPS_KEPT = timedelta(days=7)


@dataclass
class ReapReport:
    expired_requests: int = 0
    overdue_recoveries: int = 0
    unmounted: int = 0
    unmount_failed: int = 0
    vanished: int = 0
    found_unknown: int = 0
    unknown_ended: int = 0
    purged_results: int = 0
    purge_failed: int = 0
    site_errors: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        return self.__dict__.copy()

    @property
    def acted(self) -> bool:
        """Whether the sweep changed anything (or failed to): what people look for in its record."""
        return any(value for name, value in self.as_dict().items() if name != "site_errors")


def recoveries_reap(*, now: datetime | None = None) -> ReapReport:
    """One sweep, recorded with its report. ``now`` may be moved forward (tests, the command) to
    treat runs as overdue."""
    started_at = timezone.now()
    # What it decides (a run overdue, a lost mount given up, a request expired) cannot be undone:
    # on the shared clock, not this process's alone (rewind.lib.dbclock).
    report = _sweep(now or database_now())
    reaper_sweep_record(started_at=started_at, report=report)
    return report


def reaper_sweep_record(*, started_at: datetime, report: ReapReport) -> ReaperSweep:
    """Record one sweep and forget the sweeps older than ``SWEEPS_KEPT``."""
    finished_at = timezone.now()
    sweep = ReaperSweep.objects.create(
        started_at=started_at, finished_at=finished_at, report=report.as_dict(), acted=report.acted
    )
    ReaperSweep.objects.filter(started_at__lt=finished_at - SWEEPS_KEPT).delete()
    return sweep


def _sweep(now: datetime) -> ReapReport:
    report = ReapReport()
    report.expired_requests = recovery_requests_expire_stale(now=now)
    report.overdue_recoveries = _fail_overdue(now)
    report.purged_results, report.purge_failed = recovery_results_purge_expired(now=now)
    # Every enabled site, not only those holding sessions of ours: the listing also tells how
    # many sessions others hold there, and which (``FlrSiteListing``: /metrics, the dashboard).
    sites = list(Site.objects.filter(enabled=True).order_by("name"))
    # Each site in a thread of its own, so a stuck ZVM delays no other site's sweep (its circuit
    # makes it fail at once after the first timeout). A site still running at the limit is
    # reported and left to finish: every step is a compare-and-swap.
    parts = {site.pk: ReapReport() for site in sites}
    outcomes = for_each_site(
        sites,
        lambda site: _reap_site(site, now, parts[site.pk]),
        limit_s=settings.REWIND_REAPER_INTERVAL_S,
        label="reaper",
    )
    for outcome in outcomes:
        if outcome.finished:
            _merge(report, parts[outcome.site.pk])
        if outcome.error:
            report.site_errors[outcome.site.name] = outcome.error
    return report


def _merge(into: ReapReport, part: ReapReport) -> None:
    for name in ("unmounted", "unmount_failed", "vanished", "found_unknown", "unknown_ended"):
        setattr(into, name, getattr(into, name) + getattr(part, name))


def _fail_overdue(now: datetime) -> int:
    limit = now - timedelta(seconds=settings.REWIND_FLR_TIME_LIMIT_S)
    count = 0
    for recovery in RecoveryRequest.objects.filter(status=RecoveryRequest.Status.RUNNING, started_at__lt=limit):
        message = f"the recovery ran past the time limit of {settings.REWIND_FLR_TIME_LIMIT_S} s; its mount is reaped"
        with transaction.atomic():
            won = RecoveryRequest.objects.filter(pk=recovery.pk, status=RecoveryRequest.Status.RUNNING).update(
                status=RecoveryRequest.Status.FAILED, ok=False, error=message, finished_at=now
            )
            if won:
                audit_record(
                    actor=SYSTEM, action=RecoveryAction.FAILED, target=recovery, data={"error": message, "by": "reaper"}
                )
                count += 1
    return count


def _reapable(row: FlrSession, now: datetime) -> bool:
    if row.status in (S.UNMOUNT_FAILED, S.UNKNOWN):
        return True
    recovery = row.recovery
    if recovery is None or recovery.status in RecoveryRequest.FLR_OVER:
        return True
    limit = timedelta(seconds=settings.REWIND_FLR_TIME_LIMIT_S)
    started = recovery.started_at or row.created_at
    return now - started > limit


def _reap_site(site: Site, now: datetime, report: ReapReport) -> None:
    # One HTTP pool and token per site for the process: beat runs this every few minutes.
    client = site_client(site)
    listed = client.list_flr_sessions()
    flr_listing_record(site=site, sessions=listed)
    live = {s.identifier.lower(): s for s in listed if s.identifier}
    rows = list(FlrSession.objects.filter(site=site, status__in=FlrSession.LIVE).select_related("recovery", "site"))
    to_unmount: list[FlrSession] = []
    for row in rows:
        if not row.session_id:
            if _adopt_unknown(client, row, now, live, report):
                to_unmount.append(row)
            continue
        current = live.get(row.session_id.lower())
        if current is None or current.is_unmounted:  # some ZVMs list ended sessions for a while
            if session_mark_vanished(row=row, actor=SYSTEM):
                report.vanished += 1
            continue
        if row.status == S.UNMOUNTING and "unmount" in (current.status or "").lower():
            continue  # the ZVM is still dropping it; the next sweep sees it gone
        if _reapable(row, now):
            to_unmount.append(row)
    _unmount_all(client, to_unmount, report)


def _unmount_all(client: ZvmClient, rows: list[FlrSession], report: ReapReport) -> None:
    """Unmount the rows, ``UNMOUNT_THREADS`` at a time; the first exception of one is raised once all are done, and
    then none is counted (the site's sweep reports it as failed)."""
    if not rows:
        return
    outcomes = run_each(
        rows,
        partial(_unmount_one, client),
        max_threads=UNMOUNT_THREADS,
        # Threads use connections of their own, which cannot see rows of a transaction the
        # caller still holds open; then the unmounts run here, one after the other.
        inline=connection.in_atomic_block or len(rows) == 1,
        name="reaper-unmount",
    )
    results = [outcome.result() for outcome in outcomes]
    report.unmounted += sum(1 for ok in results if ok is True)
    report.unmount_failed += sum(1 for ok in results if ok is False)


def _unmount_one(client: ZvmClient, row: FlrSession) -> bool | None:
    result = session_unmount(
        client=client, row=row, actor=SYSTEM, reason="reaped", audit_action=RecoveryAction.SESSION_REAPED
    )
    return None if result is None else result.ok


def _adopt_unknown(
    client: ZvmClient, row: FlrSession, now: datetime, live: dict[str, ZvmFlrSession], report: ReapReport
) -> bool:
    """Learn the id of a mount whose answer was lost. True when the row now names a live session."""
    if row.status == S.MOUNTING and now - row.created_at < MOUNT_CALL_GRACE:
        return False  # the runner may still be waiting for the mount answer
    fits = fitting_sessions(row, live.values())
    if len(fits) > 1:
        return False  # which one is ours cannot be told: touch none, and do not call it absent
    if not fits:
        if _settled(row, now) and session_end_unseen(row=row, actor=SYSTEM, settled_s=_settle_time().total_seconds()):
            report.unknown_ended += 1
        return False
    found = fits[0]
    adopted = FlrSession.objects.filter(pk=row.pk, session_id="").update(session_id=found, status=S.UNKNOWN)
    if not adopted:
        return False
    row.refresh_from_db()
    report.found_unknown += 1
    return True


def _settle_time() -> timedelta:
    return timedelta(seconds=float(settings.ZVM_READ_TIMEOUT_S)) + UNKNOWN_SETTLE


def _settled(row: FlrSession, now: datetime) -> bool:
    """No run is still making this mount, and a session it started would be listed by now."""
    finished = row.recovery is None or row.recovery.status in RecoveryRequest.FLR_OVER
    return finished and now - row.created_at > _settle_time()
