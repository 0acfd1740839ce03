"""What happened lately: live FLR sessions per site, and the guards of the last day (database
reads only)."""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Count as DbCount
from django.urls import reverse

from recoveries.models import FlrSession, FlrSiteListing
from rewind.checkpoints.models import ChangeGuard, TaggedCheckpoint
from rewind.dashboard.approvals import listing_errors, listing_stale
from rewind.dashboard.counts import Count, at, count
from rewind.sites.models import Site

GUARD_WINDOW = timedelta(hours=24)
GUARDS_SHOWN = 10
G = ChangeGuard.Status


@dataclass(frozen=True)
class SiteSessions:
    site: Site
    ours: Count  # our live mounts (the reaper ends them once their recovery is over)
    unmount_failed: Count  # ours that would not unmount: the reaper keeps trying
    foreign: Count  # other operators' live sessions, as last listed (only a person ends them)
    listed_at: datetime | None
    listing_error: str  # why the reaper's last sweep could not list it
    listing_stale: bool


def live_sessions_per_site(now: datetime) -> list[SiteSessions]:
    """Every enabled site, and any other holding a live session of ours, by name."""
    by_site: dict[int, Counter[str]] = defaultdict(Counter)
    rows = (
        FlrSession.objects.filter(status__in=FlrSession.LIVE)
        .order_by()
        .values("site_id", "status")
        .annotate(n=DbCount("pk"))
    )
    for row in rows:
        by_site[row["site_id"]][row["status"]] += row["n"]
    listings = {x.site_id: x for x in FlrSiteListing.objects.all()}
    errors = listing_errors()
    sites = Site.objects.filter(pk__in=list(by_site)) | Site.objects.filter(enabled=True)
    live_page = reverse("admin:recoveries_flrsession_live")
    out = []
    for site in sites.distinct().order_by("name"):
        counts = by_site.get(site.pk, Counter())
        listing = listings.get(site.pk)
        foreign = listing.live_foreign if listing else 0
        out.append(
            SiteSessions(
                site=site,
                ours=count(sum(counts.values()), FlrSession, live="yes", site__id__exact=site.pk),
                unmount_failed=count(
                    counts[FlrSession.Status.UNMOUNT_FAILED],
                    FlrSession,
                    tone="bad",
                    status__exact=FlrSession.Status.UNMOUNT_FAILED,
                    site__id__exact=site.pk,
                ),
                foreign=Count(foreign, f"{live_page}?site={site.pk}", "attention" if foreign else ""),
                listed_at=listing.listed_at if listing else None,
                listing_error=errors.get(site.name, ""),
                listing_stale=listing_stale(
                    listing.listed_at if listing else None,
                    now,
                    since=site.created_at,
                    error=errors.get(site.name, ""),
                ),
            )
        )
    return out


@dataclass(frozen=True)
class GuardRow:
    guard: ChangeGuard
    wait_s: float  # request to outcome; for an unfinished guard, so far
    timed_out: list[str] = field(default_factory=list)  # VPGs that did not list the checkpoint in time
    failed: list[str] = field(default_factory=list)  # VPGs whose insert failed


@dataclass(frozen=True)
class GuardActivity:
    since: datetime
    total: Count
    ok: Count
    failed: Count
    timed_out: Count  # failed guards with a VPG that timed out
    in_progress: Count
    wait_median_s: float | None  # of the finished guards
    wait_max_s: float | None
    recent: list[GuardRow]


def _wait_s(guard: ChangeGuard, now: datetime) -> float:
    return ((guard.finished_at or now) - guard.requested_at).total_seconds()


def _rows(guards: list[ChangeGuard], now: datetime) -> list[GuardRow]:
    vpgs: dict[int, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    bad = (TaggedCheckpoint.Status.TIMED_OUT, TaggedCheckpoint.Status.FAILED)
    for guard_id, status, name in TaggedCheckpoint.objects.filter(
        guard_id__in=[g.pk for g in guards], status__in=bad
    ).values_list("guard_id", "status", "vpg_name"):
        vpgs[guard_id][status].append(name)
    return [
        GuardRow(
            guard=g,
            wait_s=_wait_s(g, now),
            timed_out=sorted(vpgs[g.pk][TaggedCheckpoint.Status.TIMED_OUT]),
            failed=sorted(vpgs[g.pk][TaggedCheckpoint.Status.FAILED]),
        )
        for g in guards
    ]


def guard_activity(now: datetime) -> GuardActivity:
    """The guards requested in the last ``GUARD_WINDOW``: how many ended how, and how long agents waited."""
    since = now - GUARD_WINDOW
    window = ChangeGuard.objects.filter(requested_at__gte=since)
    by_status: Counter[str] = Counter()
    for row in window.order_by().values("status").annotate(n=DbCount("pk")):
        by_status[row["status"]] = row["n"]
    timed_out = window.filter(status=G.FAILED, vpgs__status=TaggedCheckpoint.Status.TIMED_OUT).distinct().count()
    finished = window.filter(finished_at__isnull=False).values_list("requested_at", "finished_at")
    waits = [(end - start).total_seconds() for start, end in finished if end is not None]
    after = at(since)
    recent = list(window.order_by("-requested_at", "-pk")[:GUARDS_SHOWN])
    return GuardActivity(
        since=since,
        total=count(sum(by_status.values()), ChangeGuard, requested_at__gte=after),
        ok=count(by_status[G.OK], ChangeGuard, status__exact=G.OK, requested_at__gte=after),
        failed=count(by_status[G.FAILED], ChangeGuard, tone="bad", status__exact=G.FAILED, requested_at__gte=after),
        timed_out=count(
            timed_out, ChangeGuard, tone="bad", status__exact=G.FAILED, timed_out="yes", requested_at__gte=after
        ),
        in_progress=count(
            by_status[G.PENDING] + by_status[G.RUNNING],
            ChangeGuard,
            status__in=f"{G.PENDING},{G.RUNNING}",
            requested_at__gte=after,
        ),
        wait_median_s=statistics.median(waits) if waits else None,
        wait_max_s=max(waits) if waits else None,
        recent=_rows(recent, now),
    )


@dataclass(frozen=True)
class FailedGuards:
    since: datetime
    count: Count
    timed_out: Count
    rows: list[GuardRow]  # the newest first


def failed_guards(now: datetime) -> FailedGuards:
    """The guards of the last ``GUARD_WINDOW`` that told their agent not to proceed, and why."""
    since = now - GUARD_WINDOW
    failed = ChangeGuard.objects.filter(requested_at__gte=since, status=G.FAILED)
    timed_out = failed.filter(vpgs__status=TaggedCheckpoint.Status.TIMED_OUT).distinct().count()
    after = at(since)
    return FailedGuards(
        since=since,
        count=count(failed.count(), ChangeGuard, tone="bad", status__exact=G.FAILED, requested_at__gte=after),
        timed_out=count(
            timed_out, ChangeGuard, tone="bad", status__exact=G.FAILED, timed_out="yes", requested_at__gte=after
        ),
        rows=_rows(list(failed.order_by("-requested_at", "-pk")[:GUARDS_SHOWN]), now),
    )
