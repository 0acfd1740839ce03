"""Celery tasks of guards and tagged checkpoints: thin wrappers that take ids and call services.

The task names are in queued messages and the beat schedule: keep them. Poll rounds are queued by name
(``poller.POLL_TASK``), never through this module.
"""

from __future__ import annotations

from celery import shared_task

from rewind.checkpoints.late import checkpoints_listed_late_sweep
from rewind.checkpoints.poller import POLL_TASK, poller_round, pollers_restart_stale
from rewind.checkpoints.retention import retention_refresh_sweep, retention_warnings_sweep
from rewind.checkpoints.services import guard_insert_requeue, guards_orphaned_finish
from rewind.lib.requestid import bound_request_id

# Queued by versions that inserted a guard's checkpoints in a task of its own; nothing queues it now.
LEGACY_WAIT_TASK = "rewind.checkpoints.wait"


@shared_task(name=LEGACY_WAIT_TASK, acks_late=True, ignore_result=True)
def checkpoint_wait(guard_id: int, request_id: str | None = None, lease_token: str | None = None) -> str:
    """A message an earlier version queued for one guard: hand the guard to its sites' pollers,
    whose insert batch is the one place checkpoints are inserted. Safe to run twice (a kick is)."""
    with bound_request_id(request_id):
        return guard_insert_requeue(guard_id)


@shared_task(name=POLL_TASK, acks_late=True, ignore_result=True)
def checkpoints_poll_site(site_id: int, token: str | None = None) -> str:
    """One round of a site's poller; queues the next round itself. Safe to run twice: the round claims the site's
    poller row first, and a round whose token was replaced does nothing."""
    return poller_round(site_id, token)


@shared_task(name="rewind.checkpoints.resume_stale")
def checkpoints_resume_stale() -> int:
    """End the rows whose site was removed while they waited, and restart every site poller whose
    chain died (the guards it served carry on from their rows' state). Safe to overlap."""
    return guards_orphaned_finish() + pollers_restart_stale()


@shared_task(name="rewind.checkpoints.listed_late")
def checkpoints_listed_late() -> dict[str, object]:
    """Record the checkpoints listed only after their guard timed out. Safe to overlap (compare-and-swap)."""
    return checkpoints_listed_late_sweep().as_dict()


@shared_task(name="rewind.checkpoints.retention")
def checkpoints_retention() -> dict[str, object]:
    """Refresh when each tagged checkpoint leaves its VPG's journal, then warn of those leaving soon. Safe to
    overlap (compare-and-swap)."""
    report = retention_refresh_sweep()
    report.warned = [row.pk for row in retention_warnings_sweep()]
    return report.as_dict()
