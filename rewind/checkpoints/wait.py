"""The insert step of a guard: insert its tagged checkpoints, then hand the waiting to the site pollers.

Runs inside the Celery task ``rewind.checkpoints.wait`` (the name is in queued messages).
The task holds a worker slot only for the insert calls — one thread per VPG, in parallel,
each through the ZVM of the VPG's protected site — and returns; waiting until Zerto lists
the checkpoints is the site poller's (``rewind.checkpoints.poller``): one short round per
site serves every waiting guard of that site, so a waiting guard holds no worker, thread or
database connection.

Repeat safety (a redelivered or re-queued task):
- the task first claims the guard's lease; a live lease held by another run → it does nothing;
- a ``pending`` row is moved to ``inserting`` (CAS, audited) *before* the insert call, so only
  one run ever inserts it;
- an ``inserting`` row whose call's answer was lost (or whose run died mid-call) is never
  inserted again here: the poller resolves it by the tag and the ZVM's task list;
- rows already inserted are simply handed to the poller again.

Hand-over: the guard's lease passes to ``POLLER_OWNER``; each poll round extends it. If the
poller's chain dies, the lease runs out and the guard is queued again like any guard whose
task died; this step then finds nothing to insert and restarts the poller.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import uuid
from datetime import datetime, timedelta

from django.db import DatabaseError, connection
from django.db.models import F, Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from rewind.checkpoints import pacing
from rewind.checkpoints.lease import LEASE_S, POLLER_GRACE_S, POLLER_OWNER, UNFINISHED
from rewind.checkpoints.models import ChangeGuard, TaggedCheckpoint
from rewind.checkpoints.poller import poller_kick
from rewind.checkpoints.rows import (
    FINAL,
    call_insert,
    guard_deadline,
    guard_finish,
    mark_attempt,
    row_finish,
)
from rewind.checkpoints.selectors import site_listing_times_s
from rewind.sites import site_client, site_record_clock

logger = logging.getLogger(__name__)


def guard_wait(guard_id: int, lease_token: str | None = None) -> str:
    """Insert (or resume) the checkpoints of one guard and hand them to the pollers. Returns what happened."""
    run_id = f"run:{uuid.uuid4().hex}"
    if not _claim(guard_id, lease_token, run_id):
        return "skipped: finished, or another run holds the lease"
    guard = ChangeGuard.objects.get(pk=guard_id)
    stop, lost = threading.Event(), threading.Event()
    beat = _start_thread(_heartbeat, guard_id, run_id, stop, lost)
    try:
        pending = [r.pk for r in guard.vpgs.all() if r.status == TaggedCheckpoint.Status.PENDING]
        workers = [_start_thread(_insert_one, pk, guard) for pk in pending]
        for t in workers:
            t.join()
    finally:
        stop.set()
        beat.join()
    if lost.is_set():
        return "lease lost to another run"
    return _hand_over(guard, run_id)


def _start_thread(target: object, *args: object) -> threading.Thread:
    # Threads do not inherit context variables; the request id must follow.
    ctx = contextvars.copy_context()
    thread = threading.Thread(target=ctx.run, args=(target, *args), daemon=True)
    thread.start()
    return thread


def _claim(guard_id: int, lease_token: str | None, run_id: str) -> bool:
    now = timezone.now()
    free = Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=now)
    if lease_token:
        free |= Q(lease_owner=f"queued:{lease_token}")
    return bool(
        ChangeGuard.objects.filter(free, pk=guard_id, status__in=UNFINISHED).update(
            status=ChangeGuard.Status.RUNNING,
            started_at=Coalesce(F("started_at"), now),
            lease_owner=run_id,
            lease_expires_at=now + timedelta(seconds=LEASE_S),
            attempts=F("attempts") + 1,
        )
    )


def _heartbeat(guard_id: int, run_id: str, stop: threading.Event, lost: threading.Event) -> None:
    # Inserts wait their turn under the site's request cap, which can outlast one lease.
    try:
        while not stop.wait(LEASE_S / 3):
            try:
                renewed = ChangeGuard.objects.filter(pk=guard_id, lease_owner=run_id).update(
                    lease_expires_at=timezone.now() + timedelta(seconds=LEASE_S)
                )
            except DatabaseError:
                logger.warning("guard %s: could not renew the lease; retrying", guard_id, exc_info=True)
                continue
            if not renewed:
                lost.set()
                return
    finally:
        connection.close()


def _insert_one(row_id: int, guard: ChangeGuard) -> None:
    try:
        _insert(TaggedCheckpoint.objects.select_related("site").get(pk=row_id), guard)
    except Exception as exc:  # anything unforeseen must still end the row, or the guard hangs
        logger.exception("guard %s: the insert of VPG row %s failed", guard.pk, row_id)
        row_finish(row_id, guard, TaggedCheckpoint.Status.FAILED, error=f"internal error ({type(exc).__name__})")
    finally:
        connection.close()


def _insert(row: TaggedCheckpoint, guard: ChangeGuard) -> None:
    site = row.site
    if site is None or not site.enabled:
        error = "the protected site's ZVM is not configured (or is disabled) here"
        row_finish(row.pk, guard, TaggedCheckpoint.Status.FAILED, error=error)
        return
    if timezone.now() >= guard_deadline(guard):
        error = "not inserted: the guard had already timed out"
        row_finish(row.pk, guard, TaggedCheckpoint.Status.TIMED_OUT, error=error)
        return
    pending = TaggedCheckpoint.objects.filter(pk=row.pk, status=TaggedCheckpoint.Status.PENDING)
    if not mark_attempt(row, guard, pending, retry=False):
        return  # another run took it; the poller follows what it recorded
    # ``site_client`` shares the site's token and connection pool within this process, so
    # three VPGs on one ZVM cost one login, and later guards none.
    client = site_client(site, request_id=guard.request_id)
    failed = call_insert(client, row, guard)
    if failed is not None:
        row_finish(row.pk, guard, TaggedCheckpoint.Status.FAILED, error=failed.error)
    site_record_clock(site=site, measured=client.clock_offset())


def _hand_over(guard: ChangeGuard, run_id: str) -> str:
    """Give the rows still waiting to their sites' pollers, due at the first moment worth asking."""
    rows = list(TaggedCheckpoint.objects.filter(guard=guard).exclude(status__in=FINAL))
    if not rows:
        ChangeGuard.objects.filter(pk=guard.pk, lease_owner=run_id).update(lease_owner="", lease_expires_at=None)
        return guard_finish(guard)
    now = timezone.now()
    remaining = (guard_deadline(guard) - now).total_seconds()
    due: dict[int, datetime] = {}
    for row in rows:
        if row.site_id is None:  # its site was removed while it waited: nobody can answer for it
            error = "the protected site was removed from this service while the checkpoint was pending"
            row_finish(row.pk, guard, TaggedCheckpoint.Status.FAILED, error=error)
            continue
        if row.next_poll_at is None:
            elapsed = (now - (row.insert_started_at or now)).total_seconds()
            fc = pacing.forecast(site_listing_times_s(row.site_id, limit=pacing.HISTORY))
            row.next_poll_at = now + timedelta(seconds=pacing.next_gap(elapsed, remaining, fc))
            TaggedCheckpoint.objects.filter(pk=row.pk, next_poll_at__isnull=True).update(
                next_poll_at=row.next_poll_at,
                # A row left "inserting" with no task id by a run that died mid-call: its outcome is unknown.
                outcome_unknown_since=Coalesce(F("outcome_unknown_since"), now)
                if row.status == TaggedCheckpoint.Status.INSERTING and not row.task_id
                else F("outcome_unknown_since"),
            )
        due[row.site_id] = min(due.get(row.site_id, row.next_poll_at), row.next_poll_at)
    if not due:
        ChangeGuard.objects.filter(pk=guard.pk, lease_owner=run_id).update(lease_owner="", lease_expires_at=None)
        return guard_finish(guard)
    # The poller's rounds extend this lease; it runs out only if the poller's chain dies.
    first = min(due.values())
    ChangeGuard.objects.filter(pk=guard.pk, lease_owner=run_id).update(
        lease_owner=POLLER_OWNER, lease_expires_at=first + timedelta(seconds=POLLER_GRACE_S)
    )
    for site_id, at in due.items():
        poller_kick(site_id, at)
    return f"inserted; {len(rows)} VPG(s) handed to the poller of {len(due)} site(s)"
