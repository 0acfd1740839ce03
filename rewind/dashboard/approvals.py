"""What waits for a person: calls held for their approval, recovery requests to decide, other operators'
FLR sessions that only a person may end, and upstream tools whose definitions wait for approval
(database reads only)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.urls import reverse
from django.utils.dateparse import parse_datetime

from recoveries.models import FlrSiteListing, ReaperSweep, RecoveryRequest
from rewind.approvals.models import HeldCall
from rewind.checkpoints.models import ChangeGuard
from rewind.dashboard.counts import Count, count
from rewind.gateway.models import UpstreamTool
from rewind.gateway.selectors import held_tools
from rewind.sites.models import Site

PENDING_SHOWN = 20
# Requests whose FLR has not run yet: a mount left up on their VM may stand in their way.
OPEN_RECOVERY = (RecoveryRequest.Status.PENDING, RecoveryRequest.Status.APPROVED, RecoveryRequest.Status.RUNNING)


@dataclass(frozen=True)
class PendingRecovery:
    recovery: RecoveryRequest
    review_url: str
    expired: bool  # past its expiry; the reaper's next sweep marks it expired


@dataclass(frozen=True)
class PendingRecoveries:
    count: Count
    rows: list[PendingRecovery]  # the oldest first: they expire first


def pending_recoveries(now: datetime) -> PendingRecoveries:
    pending = RecoveryRequest.objects.filter(status=RecoveryRequest.Status.PENDING)
    rows = [
        PendingRecovery(
            recovery=r,
            review_url=reverse("admin:recoveries_recoveryrequest_review", args=[r.pk]),
            expired=r.expires_at <= now,
        )
        for r in pending.prefetch_related("approvals").order_by("created_at")[:PENDING_SHOWN]
    ]
    total = count(pending.count(), RecoveryRequest, tone="attention", status__exact=RecoveryRequest.Status.PENDING)
    return PendingRecoveries(total, rows)


@dataclass(frozen=True)
class ForeignSession:
    site: Site
    session_id: str
    status: str
    vm: str  # its name when a guard or a recovery told us, else Zerto's identifier
    vpg_identifier: str
    checkpoint_identifier: str
    mount_time: datetime | None
    # Recoveries of the same VM at this site that have not run yet.
    in_the_way_of: list[RecoveryRequest] = field(default_factory=list)


@dataclass(frozen=True)
class SiteListing:
    site: Site
    listed_at: datetime | None
    error: str  # why the reaper's last sweep could not list it
    stale: bool  # a listing was due and did not come (``listing_stale``): what is shown may be out of date


@dataclass(frozen=True)
class ForeignSessions:
    count: Count  # links to the live page, the one place where a person may end them
    sessions: list[ForeignSession]
    listings: list[SiteListing]  # when each site was last listed, and why not since


def _vm_names(identifiers: set[str]) -> dict[str, str]:
    names: dict[str, str] = {}
    for model in (ChangeGuard, RecoveryRequest):
        rows = model.objects.filter(vm_identifier__in=identifiers).values_list("vm_identifier", "vm_name")
        names.update(rows.distinct())
    return names


def _open_recoveries(identifiers: set[str]) -> dict[tuple[str, str], list[RecoveryRequest]]:
    """Open recoveries by (VM identifier, recovery site identifier): where their FLR will mount."""
    found: dict[tuple[str, str], list[RecoveryRequest]] = defaultdict(list)
    for r in RecoveryRequest.objects.filter(vm_identifier__in=identifiers, status__in=OPEN_RECOVERY).order_by("pk"):
        found[(r.vm_identifier.lower(), r.recovery_site_identifier.lower())].append(r)
    return found


def listing_stale(listed_at: datetime | None, now: datetime, *, since: datetime, error: str = "") -> bool:
    """Whether the site's listing is late: none for two reaper intervals since the last one, or,
    never listed, since the site was registered (``since``), or a sweep that could not list it.

    A site registered moments ago (the first ``make run``) is not late: the reaper's first sweep
    comes one interval after beat starts, and until then the site is "not listed yet".
    """
    late_after = timedelta(seconds=2 * settings.REWIND_REAPER_INTERVAL_S)
    if listed_at is None:
        return bool(error) or now - since > late_after
    return now - listed_at > late_after


def listing_errors() -> dict[str, str]:
    """Site name → why the reaper's last sweep could not list (or sweep) it."""
    last = ReaperSweep.objects.order_by("-started_at").values_list("report", flat=True).first()
    return {str(k): str(v) for k, v in ((last or {}).get("site_errors") or {}).items()}


def _site_listing(site: Site, listing: FlrSiteListing | None, errors: dict[str, str], now: datetime) -> SiteListing:
    listed_at = listing.listed_at if listing else None
    error = errors.get(site.name, "")
    return SiteListing(site, listed_at, error, listing_stale(listed_at, now, since=site.created_at, error=error))


def foreign_sessions(now: datetime) -> ForeignSessions:
    sites = list(Site.objects.filter(enabled=True).order_by("name"))
    listings = {x.site_id: x for x in FlrSiteListing.objects.filter(site__in=sites)}
    errors = listing_errors()
    listed = [(site, raw) for site in sites if site.pk in listings for raw in listings[site.pk].foreign]
    identifiers = {str(raw.get("vm_identifier") or "") for _, raw in listed} - {""}
    names = _vm_names(identifiers)
    waiting = _open_recoveries(identifiers)
    sessions = []
    for site, raw in listed:
        vm_id = str(raw.get("vm_identifier") or "")
        mounted = parse_datetime(str(raw.get("mount_time") or ""))
        sessions.append(
            ForeignSession(
                site=site,
                session_id=str(raw.get("session_id") or ""),
                status=str(raw.get("status") or ""),
                vm=names.get(vm_id, vm_id),
                vpg_identifier=str(raw.get("vpg_identifier") or ""),
                checkpoint_identifier=str(raw.get("checkpoint_identifier") or ""),
                mount_time=mounted,
                in_the_way_of=waiting.get((vm_id.lower(), site.identifier.lower()), []),
            )
        )
    live_page = reverse("admin:recoveries_flrsession_live")
    return ForeignSessions(
        count=Count(len(sessions), live_page, "attention" if sessions else ""),
        sessions=sessions,
        listings=[_site_listing(site, listings.get(site.pk), errors, now) for site in sites],
    )


@dataclass(frozen=True)
class HeldTool:
    tool: UpstreamTool
    state: str  # "new" or "changed"
    approve_url: str


@dataclass(frozen=True)
class HeldTools:
    count: Count
    rows: list[HeldTool]


def held_tools_waiting(now: datetime) -> HeldTools:
    """Upstream tools whose definition is new or changed: agents neither see nor call them until approved."""
    held = held_tools()
    approve = reverse("admin:rewind_upstreamtool_approve")
    rows = [
        HeldTool(t, "changed" if t.approved_digest else "new", f"{approve}?ids={t.pk}") for t in held[:PENDING_SHOWN]
    ]
    return HeldTools(count(held.count(), UpstreamTool, tone="attention", held="yes"), rows)


@dataclass(frozen=True)
class HeldCallRow:
    held: HeldCall
    review_url: str
    expired: bool  # past its expiry; the next sweep marks it expired


@dataclass(frozen=True)
class HeldCalls:
    count: Count
    rows: list[HeldCallRow]  # the oldest first: they expire first


def held_calls_waiting(now: datetime) -> HeldCalls:
    """Calls held for a person, after their checkpoints: who asks, what, how long they have waited."""
    pending = HeldCall.objects.filter(state=HeldCall.State.PENDING)
    rows = [
        HeldCallRow(h, reverse("admin:rewind_heldcall_review", args=[h.pk]), h.expires_at <= now)
        for h in pending.prefetch_related("approvals").order_by("created_at")[:PENDING_SHOWN]
    ]
    return HeldCalls(count(pending.count(), HeldCall, tone="attention", state__exact=HeldCall.State.PENDING), rows)
