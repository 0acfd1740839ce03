"""Celery tasks: thin wrappers that bind the request id and call the services."""

from __future__ import annotations

from celery import shared_task

from rewind.requestid import bound_request_id


@shared_task(name="recoveries.run", acks_late=True)
def recoveries_run(recovery_id: int, request_id: str | None = None) -> str:
    """Run one approved recovery. A repeat (redelivery) finds it no longer approved and returns."""
    from recoveries.runner import recovery_run

    with bound_request_id(request_id) as rid:
        return recovery_run(recovery_id=recovery_id, request_id=rid)


@shared_task(name="recoveries.reap")
def recoveries_reap_task(request_id: str | None = None) -> dict[str, object]:
    """One reaper sweep (beat runs it every REWIND_REAPER_INTERVAL_S); safe to overlap."""
    from recoveries.reaper import recoveries_reap

    with bound_request_id(request_id):
        return recoveries_reap().as_dict()
