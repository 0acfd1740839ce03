"""Approved recoveries whose recovery site is unavailable: they wait for it, until the request expires
(docs/operations.md, "Recoveries wait for their site").

A run that finds its site's circuit open before asking for a mount neither waits for the dead ZVM nor fails what
a person approved: it parks the request as ``waiting``, and the beat queues the run again once the site answers.
Every move is a compare-and-swap, so sweeps and duplicate messages act once. A run that fails after it asked for
a mount is never parked: a session may be up, which the reaper ends.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from recoveries.models import FlrSession, RecoveryRequest
from recoveries.selectors import recovery_site
from rewind.audit import SYSTEM, audit_record
from rewind.audit.actions import RecoveryAction
from rewind.lib.dbclock import database_now
from rewind.sites import site_circuit
from rewind.sites.models import Site
from rewind.workers.broker import queue_task
from rewind.zvm import ZvmError

logger = logging.getLogger(__name__)
Status = RecoveryRequest.Status
# A parked run queued again whose message never started a run (a broker or worker lost it) is
# queued once more after this long; meanwhile duplicate sweeps queue nothing.
REQUEUE_AFTER = timedelta(minutes=5)
# An approved request whose run has not started this long after the approval: its message may
# have been lost (the task queue was down when it was sent, or lost it in a restart). Queued
# again; a message that was only slow then finds the request running and does nothing.
APPROVED_UNSTARTED_AFTER = timedelta(seconds=60)
SWEEP_MAX_ROWS = 500


def recovery_site_unavailable(recovery: RecoveryRequest) -> str:
    """Why the request's recovery site cannot be asked now ("unavailable since …"), or "" when it can."""
    site = recovery_site(recovery)
    if site is None or not site.enabled:
        return ""  # the run says so itself: no ZVM configured (and enabled) for it
    state = site_circuit(site)
    if not state.is_open:
        return ""
    since = datetime.fromtimestamp(state.opened_at, UTC)
    return f"site {site.name} is unavailable since {since:%Y-%m-%d %H:%M:%S} UTC: {state.reason}"


def recovery_run_claim(*, recovery_id: int, request_id: str) -> RecoveryRequest | None:
    """Move an approved (or waiting, not expired) request to running; None when this caller did not. The
    compare-and-swap that makes a run happen once, whoever queued it; audits ``started`` (and ``resumed``)."""
    now = timezone.now()
    prior = RecoveryRequest.objects.filter(pk=recovery_id).values_list("status", "site_unavailable_since").first()
    if prior is None:
        return None
    status, unavailable_since = prior
    claimable = Q(status=Status.APPROVED) | Q(status=Status.WAITING, expires_at__gt=now)
    with transaction.atomic():
        won = RecoveryRequest.objects.filter(claimable, pk=recovery_id, status=status).update(
            status=Status.RUNNING,
            started_at=now,
            site_unavailable_since=None,
            site_unavailable_reason="",
            resume_queued_at=None,
        )
        if not won:
            return None
        recovery = RecoveryRequest.objects.get(pk=recovery_id)
        if status == Status.WAITING:
            audit_record(
                actor=SYSTEM,
                action=RecoveryAction.RESUMED,
                target=recovery,
                data={
                    "recovery_site": _site_name(recovery),
                    "was_unavailable_since": unavailable_since.isoformat() if unavailable_since else None,
                },
                request_id=request_id,
            )
        audit_record(
            actor=SYSTEM,
            action=RecoveryAction.STARTED,
            target=recovery,
            data={"vm": recovery.vm_name, "path": recovery.normalized_path},
            request_id=request_id,
        )
    return recovery


def recovery_should_wait(*, recovery: RecoveryRequest, site: Site, error: BaseException) -> bool:
    """Whether a run that failed with ``error`` should wait for its site: the failure came from the ZVM, the site
    is enabled with its circuit open, and no mount was asked for."""
    if not any(isinstance(e, ZvmError) for e in (error, error.__cause__)):
        return False
    if FlrSession.objects.filter(recovery=recovery).exists():
        return False
    state = site_circuit(site)
    return state.is_open and not state.disabled and site.enabled


def recovery_wait_for_site(*, recovery: RecoveryRequest, site: Site, request_id: str) -> bool:
    """Park a running request until its recovery site answers again. False when it was not running."""
    state = site_circuit(site)
    # Had the circuit closed meanwhile, its time would be an old one: then the sweep queues it soon.
    since = datetime.fromtimestamp(state.opened_at, UTC) if state.is_open else timezone.now()
    with transaction.atomic():
        won = RecoveryRequest.objects.filter(pk=recovery.pk, status=Status.RUNNING).update(
            status=Status.WAITING,
            site_unavailable_since=since,
            site_unavailable_reason=state.reason[:2000],
            resume_queued_at=None,
        )
        if won:
            recovery.refresh_from_db()
            audit_record(
                actor=SYSTEM,
                action=RecoveryAction.WAITING_FOR_SITE,
                target=recovery,
                data={
                    "recovery_site": site.name,
                    "unavailable_since": since.isoformat(),
                    "reason": state.reason[:2000],
                    "expires_at": recovery.expires_at.isoformat(),
                },
                request_id=request_id,
            )
    if won:
        logger.warning("recovery #%s waits for site %s: %s", recovery.pk, site.name, state.reason)
    return bool(won)


@dataclass
class WaitReport:
    queued: int = 0
    still_waiting: int = 0
    expired: int = 0
    requeued_approved: int = 0

    def as_dict(self) -> dict[str, object]:
        return self.__dict__.copy()


def recoveries_resume_waiting(*, now: datetime | None = None) -> WaitReport:
    """The beat's sweep over waiting requests: fail the expired, queue the run of those whose site answers; a
    queued run that never started is queued again after ``REQUEUE_AFTER``. Safe to overlap and to repeat."""
    now = now or database_now()  # expiring a request cannot be undone: the shared clock (rewind.lib.dbclock)
    report = WaitReport()
    for recovery in RecoveryRequest.objects.filter(status=Status.WAITING).order_by("pk")[:SWEEP_MAX_ROWS]:
        if recovery.expires_at <= now:
            report.expired += _fail_expired(recovery, now)
        elif recovery_site_unavailable(recovery):
            report.still_waiting += 1
        else:
            report.queued += _queue_again(recovery, now)
    report.requeued_approved = recoveries_requeue_unstarted(now=now)
    return report


def recoveries_requeue_unstarted(*, now: datetime | None = None) -> int:
    """Queue again the runs of requests approved ``APPROVED_UNSTARTED_AFTER`` ago or more that never started (their
    message refused or lost); how many. Safe to overlap: a run claims its request once."""
    now = now or timezone.now()
    unstarted = RecoveryRequest.objects.filter(status=Status.APPROVED, decided_at__lte=now - APPROVED_UNSTARTED_AFTER)
    return sum(_queue_again(r, now, status=Status.APPROVED) for r in unstarted.order_by("pk")[:SWEEP_MAX_ROWS])


def _queue_again(recovery: RecoveryRequest, now: datetime, status: str = Status.WAITING) -> bool:
    due = Q(resume_queued_at__isnull=True) | Q(resume_queued_at__lte=now - REQUEUE_AFTER)
    if not RecoveryRequest.objects.filter(due, pk=recovery.pk, status=status).update(resume_queued_at=now):
        return False
    # A broker that refuses it leaves the request waiting: it is queued again after REQUEUE_AFTER.
    queue_task("recoveries.run", recovery.pk, recovery.request_id, what=f"the run of recovery #{recovery.pk} again")
    return True


def _fail_expired(recovery: RecoveryRequest, now: datetime) -> bool:
    since = recovery.site_unavailable_since
    why = f"since {since:%Y-%m-%d %H:%M:%S} UTC" if since else "lately"
    if recovery.site_unavailable_reason:
        why += f": {recovery.site_unavailable_reason}"
    message = (
        f"the request expired at {recovery.expires_at:%Y-%m-%d %H:%M:%S} UTC while its recovery site "
        f"{_site_name(recovery)} was still unavailable ({why}); nothing was mounted"
    )
    with transaction.atomic():
        won = RecoveryRequest.objects.filter(pk=recovery.pk, status=Status.WAITING, expires_at__lte=now).update(
            status=Status.FAILED, ok=False, error=message[:4000], finished_at=now
        )
        if won:
            audit_record(
                actor=SYSTEM,
                action=RecoveryAction.FAILED,
                target=recovery,
                data={
                    "error": message[:4000],
                    "by": "expiry",
                    "recovery_site": _site_name(recovery),
                    "unavailable_since": since.isoformat() if since else None,
                },
                request_id=recovery.request_id,
            )
    return bool(won)


def _site_name(recovery: RecoveryRequest) -> str:
    return recovery.recovery_site_name or recovery.recovery_site_identifier
