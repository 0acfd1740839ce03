"""What the dashboard knows of other operators' FLR sessions, and of the reaper: each sweep lists
every enabled site, keeps which sessions there are someone else's, and is itself recorded."""

from __future__ import annotations

from typing import Any

import pytest

from recoveries.flr_sessions import flr_sessions_everywhere
from recoveries.models import FlrSession, FlrSiteListing, ReaperSweep
from recoveries.reaper import recoveries_reap

pytestmark = [pytest.mark.timeout(300)]


def _foreign_ids(site: Any) -> set[str]:
    return {s["session_id"] for s in FlrSiteListing.objects.get(site=site).foreign}


def test_a_sweep_keeps_the_sessions_it_did_not_open_and_is_recorded(transactional_db, sim, sites) -> None:
    theirs = sim.open_foreign_session("site-b", "web01", "vpg-web")
    # A session this service recorded (its recovery ended): it is no one else's.
    ours = sim.open_foreign_session("site-b", "db01", "vpg-db")
    FlrSession.objects.create(
        site=sites["site-b"], session_id=ours, vm_identifier="db01", vpg_identifier="v", status=FlrSession.Status.ENDED
    )

    report = recoveries_reap()

    assert not report.site_errors
    listing = FlrSiteListing.objects.get(site=sites["site-b"])
    assert _foreign_ids(sites["site-b"]) == {theirs}
    assert (listing.live_ours, listing.live_foreign) == (1, 1)
    assert listing.foreign[0]["vm_identifier"] == sim.vm("web01")["identifier"]
    assert _foreign_ids(sites["site-a"]) == set()
    sweep = ReaperSweep.objects.get()
    assert sweep.report["site_errors"] == {}
    assert sweep.finished_at >= sweep.started_at
    assert not sweep.acted


def test_a_site_that_cannot_be_listed_keeps_its_last_listing(transactional_db, sim, sites) -> None:
    theirs = sim.open_foreign_session("site-b", "web01", "vpg-web")
    recoveries_reap()
    before = FlrSiteListing.objects.get(site=sites["site-b"]).listed_at
    sim.add_fault("http_error", site="site-b", status=503, path_regex=r"/v1/flrs$", method="GET", count=5)

    report = recoveries_reap()

    assert "Site B" in report.site_errors
    assert FlrSiteListing.objects.get(site=sites["site-b"]).listed_at == before
    assert _foreign_ids(sites["site-b"]) == {theirs}
    last = ReaperSweep.objects.order_by("-started_at").first()
    assert last is not None
    assert set(last.report["site_errors"]) == {"Site B"}


def test_the_live_page_listing_refreshes_what_the_dashboard_shows(transactional_db, sim, sites) -> None:
    recoveries_reap()
    assert _foreign_ids(sites["site-b"]) == set()
    theirs = sim.open_foreign_session("site-b", "web01", "vpg-web")

    flr_sessions_everywhere(live_only=True)

    assert _foreign_ids(sites["site-b"]) == {theirs}
