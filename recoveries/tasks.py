"""Celery tasks: thin wrappers that bind the request id and call the services."""

from __future__ import annotations

from celery import Task, shared_task

from recoveries.announce import recovery_requests_warn_expiring
from recoveries.approver_email import NOTIFY_TASK, recovery_notify_approvers
from recoveries.models import RecoveryRequest
from recoveries.reaper import recoveries_reap
from recoveries.restore.services import WRITE_BACK_TASK, restore_compare
from recoveries.restore.sweep import restores_resume_stalled
from recoveries.restore.write_back import restore_write_back_step
from recoveries.runner import recovery_run
from recoveries.site_wait import recoveries_resume_waiting
from rewind.lib.requestid import bound_request_id


@shared_task(name="recoveries.run", acks_late=True)
def recoveries_run(recovery_id: int, request_id: str | None = None) -> str:
    """Run one approved recovery. A repeat (redelivery) finds it no longer approved and returns."""
    with bound_request_id(request_id) as rid:
        status = recovery_run(recovery_id=recovery_id, request_id=rid)
        if status == RecoveryRequest.Status.CONFIRM:  # a restore in place: the diff comes next
            restore_compare(recovery_id=recovery_id, request_id=rid)
        return status


@shared_task(name="recoveries.restores_resume")
def recoveries_restores_resume() -> int:
    """Compare the pulled files never compared, queue again the write-backs whose step fell silent."""
    return restores_resume_stalled()


@shared_task(name=WRITE_BACK_TASK, acks_late=True)
def recoveries_write_back(recovery_id: int, request_id: str | None = None) -> str:
    """One step of a confirmed write-back into the guest; queues the next while its guard runs."""
    with bound_request_id(request_id) as rid:
        return restore_write_back_step(recovery_id=recovery_id, request_id=rid)


@shared_task(name="recoveries.reap")
def recoveries_reap_task(request_id: str | None = None) -> dict[str, object]:
    """One reaper sweep (beat runs it every REWIND_REAPER_INTERVAL_S); safe to overlap."""
    with bound_request_id(request_id):
        return recoveries_reap().as_dict()


@shared_task(name="recoveries.resume_waiting")
def recoveries_resume_waiting_task() -> dict[str, object]:
    """Queue again the runs waiting for a site that answers now; fail those that expired. Safe to overlap."""
    return recoveries_resume_waiting().as_dict()


# Mail servers are down for minutes, not seconds: back off 30 s, 1, 2, 4, 8 min, then give up
# (about a quarter of an hour in all; the request waits in the admin queue regardless).
NOTIFY_MAX_RETRIES = 5


@shared_task(
    name=NOTIFY_TASK,
    bind=True,
    # smtplib.SMTPException, refused connections and timeouts are all OSError.
    autoretry_for=(OSError,),
    retry_backoff=30,
    retry_backoff_max=480,
    retry_jitter=False,
    max_retries=NOTIFY_MAX_RETRIES,
)
def recoveries_notify_approvers(self: Task, recovery_id: int, request_id: str | None = None) -> str:
    """Mail the approvers of a new request; retried on SMTP and network errors a bounded number of times, then
    recorded failed."""
    with bound_request_id(request_id) as rid:
        return recovery_notify_approvers(
            recovery_id=recovery_id, request_id=rid, last_try=self.request.retries >= NOTIFY_MAX_RETRIES
        )


@shared_task(name="recoveries.warn_expiring", ignore_result=True)
def recoveries_warn_expiring() -> int:
    """Tell the channels about pending requests close to their expiry, once each. Safe to overlap."""
    return recovery_requests_warn_expiring()
