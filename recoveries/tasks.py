"""Celery tasks: thin wrappers that bind the request id and call the services."""

from __future__ import annotations

from celery import Task, shared_task

from recoveries.notify import recovery_notify_approvers, recovery_notify_failed
from recoveries.reaper import recoveries_reap
from recoveries.runner import recovery_run
from recoveries.site_wait import recoveries_resume_waiting
from rewind.requestid import bound_request_id


@shared_task(name="recoveries.run", acks_late=True)
def recoveries_run(recovery_id: int, request_id: str | None = None) -> str:
    """Run one approved recovery. A repeat (redelivery) finds it no longer approved and returns."""
    with bound_request_id(request_id) as rid:
        return recovery_run(recovery_id=recovery_id, request_id=rid)


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


@shared_task(name="recoveries.notify_approvers", bind=True, max_retries=NOTIFY_MAX_RETRIES)
def recoveries_notify_approvers(self: Task, recovery_id: int, request_id: str | None = None) -> str:
    """Mail the approvers of a new request; retried on SMTP and network errors, a bounded number of times."""
    with bound_request_id(request_id) as rid:
        try:
            return recovery_notify_approvers(recovery_id=recovery_id, request_id=rid)
        except OSError as exc:  # smtplib.SMTPException, refused connections and timeouts are all OSError
            if self.request.retries >= NOTIFY_MAX_RETRIES:
                recovery_notify_failed(
                    recovery_id=recovery_id, error=exc, attempts=self.request.retries + 1, request_id=rid
                )
                return "failed"
            raise self.retry(exc=exc, countdown=30 * 2**self.request.retries) from None
