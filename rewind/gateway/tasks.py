"""Celery tasks of the gateway: thin wrappers around the services. The names are in the beat schedule: keep them."""

from __future__ import annotations

from celery import shared_task

from rewind.gateway.listing import upstreams_refresh


@shared_task(name="rewind.gateway.refresh_tools", ignore_result=True)
def upstreams_refresh_task() -> dict[str, str]:
    """List every enabled upstream's tools again (new tools become sightings). Safe to overlap."""
    return upstreams_refresh()
