"""Reads of guards and their tagged checkpoints (database only, never a ZVM): querysets for
REST and the admin, and the per-VPG report for the MCP tools."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Count, Prefetch, Q, QuerySet

from rewind.checkpoints.models import ChangeGuard, TaggedCheckpoint
from rewind.errors import NotFoundError

FINAL_ROW = (TaggedCheckpoint.Status.LISTED, TaggedCheckpoint.Status.FAILED, TaggedCheckpoint.Status.TIMED_OUT)


def _iso(value: datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value else None


@dataclass(frozen=True)
class VpgReport:
    name: str
    identifier: str
    status: str
    checkpoint_identifier: str | None = None
    checkpoint_timestamp: str | None = None
    error: str | None = None
    waited_ms: int | None = None
    recovery_site: str | None = None
    listed_late_at: str | None = None  # timed out, then listed: recoverable, yet the guard stays not ok


@dataclass(frozen=True)
class GuardReport:
    id: int
    ok: bool
    finished: bool
    status: str
    must_not_proceed: str | None
    vm: str
    vm_identifier: str
    change_id: str
    tag: str
    tool: str
    action: str
    agent: str
    listed: int
    total: int
    vpgs: list[VpgReport] = field(default_factory=list)
    landed: list[VpgReport] = field(default_factory=list)


def guard_vpg_reports(guard: ChangeGuard) -> list[VpgReport]:
    return [
        VpgReport(
            name=r.vpg_name,
            identifier=r.vpg_identifier,
            status=r.status,
            checkpoint_identifier=r.checkpoint_identifier or None,
            checkpoint_timestamp=_iso(r.checkpoint_timestamp),
            error=r.error or None,
            waited_ms=r.waited_ms,
            recovery_site=r.recovery_site_name or None,
            listed_late_at=_iso(r.listed_late_at),
        )
        for r in TaggedCheckpoint.objects.filter(guard=guard).order_by("vpg_name")
    ]


def guard_progress(guard_id: int) -> tuple[str, int, int]:
    """(guard status, VPGs listed, VPGs in all): one cheap read for progress notifications."""
    status = ChangeGuard.objects.filter(pk=guard_id).values_list("status", flat=True).first() or ""
    rows = list(TaggedCheckpoint.objects.filter(guard_id=guard_id).values_list("status", flat=True))
    return status, sum(1 for s in rows if s == TaggedCheckpoint.Status.LISTED), len(rows)


def guard_report(guard: ChangeGuard) -> GuardReport:
    guard.refresh_from_db()
    vpgs = guard_vpg_reports(guard)
    finished = guard.status in (ChangeGuard.Status.OK, ChangeGuard.Status.FAILED)
    ok = guard.status == ChangeGuard.Status.OK
    landed = [v for v in vpgs if v.status == TaggedCheckpoint.Status.LISTED]
    if ok:
        reason = None
    elif finished:
        reason = f"the checkpoints are not all in place ({guard.error or 'failed'}); do not make the change"
    else:
        reason = (
            f"the checkpoints are not listed yet ({len(landed)}/{len(vpgs)} VPGs); "
            f"do not make the change until zerto_checkpoint_status({guard.pk}) says ok"
        )
    return GuardReport(
        id=guard.pk,
        ok=ok,
        finished=finished,
        status=guard.status,
        must_not_proceed=reason,
        vm=guard.vm_name,
        vm_identifier=guard.vm_identifier,
        change_id=guard.change_id,
        tag=guard.tag,
        tool=guard.tool,
        action=guard.action,
        agent=guard.agent_name,
        listed=len(landed),
        total=len(vpgs),
        vpgs=vpgs,
        landed=landed,
    )


def site_listing_times_s(site_id: int | None, *, limit: int = 20) -> list[float]:
    """How long the site's ZVM took to list our recent checkpoints (insert start → seen listed), newest first.

    What the wait's pacing learns from; only listed rows count (a failure or timeout says
    nothing about the usual time).
    """
    if site_id is None:
        return []
    waited = (
        TaggedCheckpoint.objects.filter(
            site_id=site_id,
            status=TaggedCheckpoint.Status.LISTED,
            insert_started_at__isnull=False,
            waited_ms__isnull=False,
        )
        .order_by("-insert_started_at")
        .values_list("waited_ms", flat=True)[:limit]
    )
    return [ms / 1000 for ms in waited if ms is not None]


def guard_list(
    *, agent: str | None = None, vm: str | None = None, status: str | None = None, change_id: str | None = None
) -> QuerySet[ChangeGuard]:
    """Guards newest first with VPG counts; ``vm`` matches the VM's name or its identifier."""
    qs = ChangeGuard.objects.annotate(
        vpgs_total=Count("vpgs"),
        vpgs_listed=Count("vpgs", filter=Q(vpgs__status=TaggedCheckpoint.Status.LISTED)),
    )
    if agent:
        qs = qs.filter(agent_name=agent)
    if vm:
        qs = qs.filter(Q(vm_name=vm) | Q(vm_identifier=vm))
    if status:
        qs = qs.filter(status=status)
    if change_id:
        qs = qs.filter(change_id=change_id)
    return qs.order_by("-requested_at", "-pk")


def guard_get(pk: int) -> ChangeGuard:
    """One guard with its counts and tagged checkpoints. Read only: a stale guard is not
    queued again here (``services.guard_read_and_resume`` does that). Raises NotFoundError."""
    guard = (
        guard_list()
        .prefetch_related(
            Prefetch("vpgs", queryset=TaggedCheckpoint.objects.select_related("site").order_by("vpg_name"))
        )
        .filter(pk=pk)
        .first()
    )
    if guard is None:
        raise NotFoundError(f"there is no guard #{pk}")
    return guard


def guard_timeout_s(guard_id: int) -> int:
    """The guard's timeout in seconds. Raises NotFoundError."""
    timeout = ChangeGuard.objects.filter(pk=guard_id).values_list("timeout_s", flat=True).first()
    if timeout is None:
        raise NotFoundError(f"there is no guard #{guard_id}")
    return timeout
