"""Celery tasks of sites: thin wrappers around the services. The names are in the beat schedule: keep them."""

from __future__ import annotations

from celery import shared_task

from rewind.sites.announce import sites_announce_down
from rewind.sites.refresh import sites_identity_refresh
from rewind.sites.services import sites_probe


@shared_task(name="rewind.sites.probe", ignore_result=True)
def sites_probe_task() -> dict[str, object]:
    """Give each site whose circuit is open and due its one trial call (``sites_probe``). Safe to overlap."""
    report = sites_probe()
    return {"probed": report.probed, "skipped": report.skipped, "audited": report.audited}


@shared_task(name="rewind.sites.refresh_identity", ignore_result=True)
def sites_identity_refresh_task() -> dict[str, object]:
    """Ask every enabled site who it is (``sites_identity_refresh``). Safe to overlap."""
    report = sites_identity_refresh()
    return {"refreshed": report.refreshed, "failed": report.failed}


@shared_task(name="rewind.sites.notify_down", ignore_result=True)
def sites_notify_down_task() -> list[str]:
    """Tell the channels about sites unreachable for REWIND_NOTIFY_SITE_DOWN_MIN, once per outage. Safe to overlap."""
    return sites_announce_down()
