"""Whether the service itself is well: its sites, its workers, the reaper, the audit chain, the gateway's upstreams.

Database reads, plus the shared stores for the sites' circuits and tokens (``rewind.sites.health``);
never a ZVM call.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django_celery_results.models import TaskResult

from recoveries.models import ReaperSweep
from rewind.audit.actions import AuditLogAction, RecoveryAction
from rewind.audit.models import AuditEvent
from rewind.audit.selectors import VERIFICATION_ACTIONS, audit_chain_position, audit_last_verification
from rewind.dashboard.counts import Count, at, change_url, changelist_url, count
from rewind.gateway.models import Upstream
from rewind.gateway.selectors import upstream_links_said
from rewind.sites.health import SiteHealth, sites_health
from rewind.workers.models import BrokerOutage, WorkerHeartbeat
from rewind.workers.selectors import WorkersSeen, broker_outage_describe, broker_outage_open, workers_seen

# A verification older than this is shown as stale: run manage.py audit_verify (daily, from cron).
VERIFY_STALE_AFTER = timedelta(hours=24)


def site_health_list(now: datetime) -> list[SiteHealth]:
    return sites_health(now)


# The beat's most frequent sweep (rewind/celery.py): its results say when the beat last ran.
BEAT_PULSE_TASK = "rewind.checkpoints.resume_stale"
BEAT_PULSE_S = 30.0


@dataclass(frozen=True)
class Workers:
    seen: WorkersSeen
    alive: Count
    text: str
    queue: str  # whether the task queue answers: the outage going on, else the last one
    outages: Count
    beat: str  # when the beat's 30 s sweep last ran
    beat_late: bool


def workers_status(now: datetime) -> Workers:
    seen = workers_seen(now)
    open_outage = broker_outage_open()
    last = open_outage or BrokerOutage.objects.order_by("-started_at").first()
    if open_outage is not None:
        queue = broker_outage_describe(open_outage, now)
    elif last is not None:
        queue = f"the task queue answers; last outage: {broker_outage_describe(last, now)}"
    else:
        queue = "the task queue answers"
    outages = BrokerOutage.objects.count()
    beat, beat_late = _beat_pulse(now)
    return Workers(
        seen,
        Count(seen.alive, changelist_url(WorkerHeartbeat), "" if seen.alive else "bad"),
        seen.describe(now),
        queue,
        Count(outages, changelist_url(BrokerOutage), "bad" if open_outage else ""),
        beat,
        beat_late,
    )


def _beat_pulse(now: datetime) -> tuple[str, bool]:
    """When the beat's most frequent sweep last ran, and whether that is late (three periods)."""
    last = (
        TaskResult.objects.filter(task_name=BEAT_PULSE_TASK).order_by("-date_done").values_list("date_done", flat=True)
    ).first()
    if last is None:
        return "the beat has not run its 30 s sweep yet (is celery beat running?)", True
    ago = (now - last).total_seconds()
    if ago > 3 * BEAT_PULSE_S:
        return f"the beat's 30 s sweep last ran {ago:.0f} s ago: is celery beat running?", True
    return f"the beat's 30 s sweep ran {max(0.0, ago):.0f} s ago", False


@dataclass(frozen=True)
class ReaperAction:
    label: str
    count: Count


@dataclass(frozen=True)
class ReaperStatus:
    last: ReaperSweep | None
    last_url: str
    overdue: bool  # no sweep for two intervals: is beat running?
    interval_s: int
    last_acted: ReaperSweep | None  # the latest sweep that changed something, and what it did
    actions: list[ReaperAction]
    site_errors: dict[str, str]  # of the last sweep
    sweeps: Count


# What a sweep reports, and the audit action it recorded each of as.
_REPORTED = (
    ("unmounted", "unmounted", RecoveryAction.SESSION_REAPED),
    ("unmount_failed", "unmount failed", RecoveryAction.SESSION_UNMOUNT_FAILED),
    ("vanished", "gone from the ZVM", RecoveryAction.SESSION_VANISHED),
    ("unknown_ended", "lost mounts ended", RecoveryAction.SESSION_VANISHED),
    ("found_unknown", "lost mounts found", None),
    ("expired_requests", "requests expired", RecoveryAction.EXPIRED),
    ("overdue_recoveries", "overdue runs failed", RecoveryAction.FAILED),
    ("purged_results", "recovered files deleted", RecoveryAction.RESULT_PURGED),
    ("purge_failed", "deletions failed", None),
)


def _actions(sweep: ReaperSweep) -> list[ReaperAction]:
    out = []
    window = {"time__gte": at(sweep.started_at), "time__lte": at(sweep.finished_at), "actor_type__exact": "system"}
    for key, label, action in _REPORTED:
        value = int(sweep.report.get(key) or 0)
        if not value:
            continue
        url = changelist_url(AuditEvent, action__exact=str(action), **window) if action else change_url(sweep)
        out.append(ReaperAction(label, Count(value, url, "bad" if "fail" in key else "")))
    return out


def reaper_status(now: datetime) -> ReaperStatus:
    last = ReaperSweep.objects.order_by("-started_at").first()
    acted = ReaperSweep.objects.filter(acted=True).order_by("-started_at").first()
    interval = settings.REWIND_REAPER_INTERVAL_S
    overdue = last is None or now - last.finished_at > timedelta(seconds=2 * interval)
    return ReaperStatus(
        last=last,
        last_url=change_url(last) if last else changelist_url(ReaperSweep),
        overdue=overdue,
        interval_s=interval,
        last_acted=acted,
        actions=_actions(acted) if acted else [],
        site_errors=dict(last.report.get("site_errors") or {}) if last else {},
        sweeps=count(ReaperSweep.objects.count(), ReaperSweep),
    )


@dataclass(frozen=True)
class AuditStatus:
    last: AuditEvent | None  # the newest recorded verification
    ok: bool | None
    stale: bool
    events: Count  # every event in the log
    since_verified: Count  # appended after the last verification: not yet proven
    verifications: Count


def audit_status(now: datetime) -> AuditStatus:
    last = audit_last_verification()
    newest = audit_chain_position()[0]
    # A verification just recorded may wait a moment for its chain position: nothing came after it.
    after = (last.seq or newest) if last else 0
    return AuditStatus(
        last=last,
        ok=None if last is None else last.action == AuditLogAction.CHAIN_VERIFIED,
        stale=last is None or now - last.time > VERIFY_STALE_AFTER,
        events=Count(newest, changelist_url(AuditEvent)),
        since_verified=count(max(0, newest - after), AuditEvent, seq__gt=after),
        verifications=count(
            AuditEvent.objects.filter(action__in=[str(a) for a in VERIFICATION_ACTIONS]).count(),
            AuditEvent,
            action__in=",".join(VERIFICATION_ACTIONS),
        ),
    )


@dataclass(frozen=True)
class UpstreamHealth:
    upstream: Upstream
    listing_error: str  # its last listing's failure, empty when it listed
    down: list[str]  # one sentence per process that cannot reach it now


@dataclass(frozen=True)
class Upstreams:
    enabled: int
    down: Count  # upstreams that some process cannot reach, or whose last listing failed
    rows: list[UpstreamHealth]  # the ones in trouble


def upstreams_status(now: datetime) -> Upstreams:
    """Enabled upstreams whose last listing failed, or that a process cannot reach now."""
    upstreams = list(Upstream.objects.filter(enabled=True).order_by("name"))
    rows = [UpstreamHealth(u, u.last_error, upstream_links_said(u)) for u in upstreams]
    troubled = [r for r in rows if r.listing_error or r.down]
    return Upstreams(
        len(upstreams), Count(len(troubled), changelist_url(Upstream), "bad" if troubled else ""), troubled
    )
