"""A site the reaper has not listed yet is "not listed yet" until a listing was due, then stale."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from recoveries.flr_listing import flr_listing_record
from recoveries.reaper import ReapReport, reaper_sweep_record
from rewind.dashboard import activity, approvals
from rewind.models import Site

pytestmark = pytest.mark.django_db


def _site(name: str, *, registered_ago: timedelta = timedelta(0)) -> Site:
    site = Site.objects.create(name=name, base_url=f"https://{name.lower().replace(' ', '-')}.example")
    Site.objects.filter(pk=site.pk).update(created_at=timezone.now() - registered_ago)
    site.refresh_from_db()
    return site


def test_a_site_registered_moments_ago_is_not_listed_yet_and_not_stale(admin_client: Client) -> None:
    _site("Site New")
    now = timezone.now()

    (row,) = activity.live_sessions_per_site(now)
    (listing,) = approvals.foreign_sessions(now).listings

    assert row.listed_at is None
    assert not row.listing_stale
    assert not listing.stale
    html = admin_client.get("/admin/").content.decode()
    assert "not listed yet" in html
    assert "stale" not in html.split("sessions-per-site", 1)[1].split("</table>", 1)[0]


def test_a_site_never_listed_two_reaper_intervals_after_it_was_registered_is_stale(settings: Any) -> None:
    _site("Site Old", registered_ago=timedelta(seconds=2 * settings.REWIND_REAPER_INTERVAL_S + 1))

    (row,) = activity.live_sessions_per_site(timezone.now())

    assert row.listing_stale


def test_a_site_a_sweep_could_not_list_is_stale_at_once() -> None:
    site = _site("Site Down")
    reaper_sweep_record(started_at=timezone.now(), report=ReapReport(site_errors={site.name: "unavailable"}))

    (listing,) = approvals.foreign_sessions(timezone.now()).listings

    assert listing.stale
    assert listing.error == "unavailable"


def test_a_listed_site_is_stale_two_reaper_intervals_after_its_last_listing(settings: Any) -> None:
    site = _site("Site Listed", registered_ago=timedelta(days=1))
    flr_listing_record(site=site, sessions=[])
    later = timezone.now() + timedelta(seconds=2 * settings.REWIND_REAPER_INTERVAL_S + 1)

    assert not activity.live_sessions_per_site(timezone.now())[0].listing_stale
    assert activity.live_sessions_per_site(later)[0].listing_stale
