"""Which VPG a recovery mounts when several qualify: healthy recovery site, newest change, name."""

from __future__ import annotations

from typing import Any

import pytest

from recoveries.services import recovery_request_create
from rewind.audit import Actor
from rewind.models import ChangeGuard, Site, TaggedCheckpoint
from rewind.sites import site_check, site_update
from rewind.sites.zvm_shared import shared_breaker

pytestmark = pytest.mark.django_db
APP_CONF = "/etc/app/app.conf"


def _make_unhealthy(sim: Any, site: Site) -> None:
    """A real failed identity check: the ZVM answers 503 on /v1/localsite, then recovers."""
    sim.add_fault("http_error", site=site.base_url.rstrip("/").rsplit("/", 1)[-1], status=503, path_regex="localsite")
    try:
        assert not site_check(site=site).ok
    finally:
        sim.clear_faults()
    site.refresh_from_db()
    assert site.last_error


def _only_on(guard: ChangeGuard, vpg_name: str) -> None:
    """As if the other VPGs' inserts of this change had failed."""
    guard.vpgs.exclude(vpg_name=vpg_name).update(status=TaggedCheckpoint.Status.FAILED)


def test_with_two_vpgs_to_the_same_site_the_newest_change_wins_then_the_name(sim, sites, agent, tagged) -> None:
    tagged("web01", "chg-1")
    newer = tagged("web01", "chg-2")
    # One change: both VPGs tie on recovery site and change, the name decides (stable).
    by_change = recovery_request_create(agent=agent, vm="web01", path="/etc/hostname", reason="x", change_id="chg-1")
    assert by_change.vpg_name == "vpg-web"
    # The newest change landed only on vpg-web-dr: newest beats the name.
    _only_on(newer, "vpg-web-dr")
    latest = recovery_request_create(agent=agent, vm="web01", path="/etc/hostname", reason="x")
    assert (latest.vpg_name, latest.checkpoint_tag) == ("vpg-web-dr", newer.tag)


def test_a_recovery_site_that_failed_its_last_check_is_avoided(sim, sites, agent, tagged) -> None:
    tagged("app01", "chg-1")
    healthy = recovery_request_create(agent=agent, vm="app01", path=APP_CONF, reason="x", change_id="chg-1")
    assert healthy.vpg_name == "vpg-app-1"  # all healthy: by name
    _make_unhealthy(sim, sites["site-b"])
    avoided = recovery_request_create(agent=agent, vm="app01", path=APP_CONF, reason="x", change_id="chg-1")
    assert (avoided.vpg_name, avoided.recovery_site_name) == ("vpg-app-3", "Site C")
    # Its next check succeeds: it is preferred by name again.
    assert site_check(site=sites["site-b"]).ok
    again = recovery_request_create(agent=agent, vm="app01", path=APP_CONF, reason="x", change_id="chg-1")
    assert again.vpg_name == "vpg-app-1"


def test_a_recovery_site_marked_unavailable_is_avoided(sim, sites, agent, tagged) -> None:
    tagged("app01", "chg-1")
    b = sites["site-b"]
    shared_breaker().failed(str(b.pk), b.name, "the ZVM did not answer", at_once=True)
    avoided = recovery_request_create(agent=agent, vm="app01", path=APP_CONF, reason="x", change_id="chg-1")
    assert (avoided.vpg_name, avoided.recovery_site_name) == ("vpg-app-3", "Site C")
    shared_breaker().answered(str(b.pk), b.name)
    again = recovery_request_create(agent=agent, vm="app01", path=APP_CONF, reason="x", change_id="chg-1")
    assert again.vpg_name == "vpg-app-1"


def test_a_healthy_site_beats_a_newer_change_on_an_unhealthy_one(sim, sites, agent, tagged) -> None:
    older = tagged("app01", "chg-1")
    newer = tagged("app01", "chg-2")
    _only_on(newer, "vpg-app-1")
    _make_unhealthy(sim, sites["site-b"])
    latest = recovery_request_create(agent=agent, vm="app01", path=APP_CONF, reason="x")
    assert (latest.vpg_name, latest.checkpoint_tag) == ("vpg-app-3", older.tag)
    # Asked for explicitly, the newer change is still used, on the only VPG that has it.
    explicit = recovery_request_create(agent=agent, vm="app01", path=APP_CONF, reason="x", change_id="chg-2")
    assert explicit.vpg_name == "vpg-app-1"


def test_a_disabled_recovery_site_is_never_chosen_and_an_unhealthy_one_is_a_last_resort(
    sim, sites, agent, tagged
) -> None:
    tagged("app01", "chg-1")
    site_update(actor=Actor.system("tests"), site=sites["site-b"], enabled=False)
    _make_unhealthy(sim, sites["site-c"])
    # site-b is off (not usable at all); site-c failed its check but is the only one left.
    chosen = recovery_request_create(agent=agent, vm="app01", path=APP_CONF, reason="x", change_id="chg-1")
    assert (chosen.vpg_name, chosen.recovery_site_name) == ("vpg-app-3", "Site C")
