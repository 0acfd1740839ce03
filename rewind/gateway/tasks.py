"""Celery tasks of the gateway: thin wrappers around the services. The names are in the beat schedule: keep them."""

from __future__ import annotations

from celery import shared_task

from rewind.approvals.services import held_calls_sweep
from rewind.checkpoints.holds import held_calls_guarding_advance
from rewind.gateway.listing import upstreams_refresh
from rewind.gateway.release import held_call_release_now


@shared_task(name="rewind.gateway.refresh_tools", ignore_result=True)
def upstreams_refresh_task() -> dict[str, str]:
    """List every enabled upstream's tools again (new tools become sightings). Safe to overlap."""
    return upstreams_refresh()


@shared_task(name="rewind.gateway.held_call_release", ignore_result=True)
def held_call_release_task(held_id: int) -> str:
    """Release an approved held call unless its waiting call (or a repeat of this task) did first: checked
    again, then forwarded once. Safe to repeat: the release is claimed by a compare-and-swap."""
    return held_call_release_now(held_id)


@shared_task(name="rewind.gateway.held_calls_sweep", ignore_result=True)
def held_calls_sweep_task() -> dict[str, int]:
    """Move on the held calls whose guard ended unread, expire what nobody decided in time, queue the
    release of approvals nobody released, and end releases whose process died. Safe to overlap (CAS)."""
    moved = held_calls_guarding_advance()
    report = held_calls_sweep()
    return {"guarding_moved": moved, **report.__dict__}
