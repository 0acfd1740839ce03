"""One hung site delays no other site's sweep: the reaper, late listings, the identity refresh, dead pollers.

Site A, the first in every sweep's order, hangs on every path until the test clears the fault
(the simulator then answers it). Each sweep runs in a thread of the test; the other sites' rows
must be processed while the sweep is still held up by Site A, which proves they did not wait
for it. Outcomes only: no
timing is measured, the waits below are bounds on a hang.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from recoveries.models import FlrSession
from recoveries.reaper import recoveries_reap
from rewind.audit import Actor
from rewind.checkpoints.late import checkpoints_listed_late_sweep
from rewind.checkpoints.models import ChangeGuard, TaggedCheckpoint
from rewind.checkpoints.poller import pollers_restart_stale
from rewind.sites import site_check, site_create
from rewind.sites.models import Site
from rewind.sites.refresh import sites_identity_refresh
from tests.fixtures import wait_until
from tests.helpers import insert_tagged_checkpoint, work_queued
from tests.simfixtures import PASSWORD

pytestmark = pytest.mark.timeout(300)
SLUGS = {"site-a": "Site A", "site-b": "Site B", "site-c": "Site C"}
BOUND_S = 50.0  # how long a healthy site's part may take before the test calls it hung


def _register(sim: Any) -> dict[str, Site]:
    out = {}
    for slug, name in SLUGS.items():
        site = site_create(
            actor=Actor.system("tests"),
            name=name,
            base_url=sim.site_url(slug),
            username="admin",
            password=PASSWORD,
        )
        assert site_check(site=site).ok
        out[slug] = Site.objects.get(pk=site.pk)
    return out


@pytest.fixture
def sites(sim: Any, transactional_db: None, settings: Any) -> dict[str, Site]:
    """Committed, so the sweeps' threads see them."""
    # A bound the hung calls never reach: the test ends the hang itself by clearing the fault.
    settings.ZVM_READ_TIMEOUT_S = 120
    settings.REWIND_LOOKUP_CACHE_S = 0
    return _register(sim)


@pytest.fixture
def in_background() -> Iterator[Callable[[Callable[[], Any]], Future[Any]]]:
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="sweep") as pool:
        yield pool.submit


def _hang(sim: Any, slug: str = "site-a") -> int:
    """Hang every path of the site until the faults are cleared; the requests it saw so far."""
    seen = sim.requests_seen(slug)
    sim.add_fault("hang", site=slug, seconds=3600, path_regex=".*")
    return seen


def test_the_reaper_ends_the_healthy_sites_sessions_while_another_site_hangs(
    sim: Any, sites: dict[str, Site], in_background: Any
) -> None:
    rows = {
        slug: FlrSession.objects.create(
            site=site,
            session_id=f"gone-{slug}",
            vm_identifier="vm",
            vpg_identifier="vpg",
            checkpoint_identifier="cp",
            status=FlrSession.Status.MOUNTED,
        )
        for slug, site in sites.items()
    }

    def status(slug: str) -> str:
        return FlrSession.objects.values_list("status", flat=True).get(pk=rows[slug].pk)

    _hang(sim)
    sweep = in_background(recoveries_reap)
    wait_until(
        lambda: status("site-b") == status("site-c") == FlrSession.Status.ENDED, BOUND_S
    )  # vanished from their ZVMs
    assert not sweep.done()  # still held up by Site A: the others did not wait for it
    assert status("site-a") == FlrSession.Status.MOUNTED
    sim.clear_faults()
    report = sweep.result(timeout=BOUND_S)
    assert report.vanished == 3
    assert report.site_errors == {}


def test_the_late_listing_sweep_records_the_healthy_sites_checkpoints_while_another_site_hangs(
    sim: Any, sites: dict[str, Site], in_background: Any
) -> None:
    # Protected at Site A, Site B and Site C; the sweep takes the newest insert first: Site A's.
    for age_s, vm in ((10, "db01"), (20, "win01"), (30, "edge01")):
        guard = insert_tagged_checkpoint(sim, sites, vm, f"late-{vm}")
        ChangeGuard.objects.filter(pk=guard.pk).update(status=ChangeGuard.Status.FAILED)
        guard.vpgs.update(
            status=TaggedCheckpoint.Status.TIMED_OUT,
            checkpoint_identifier="",
            checkpoint_timestamp=None,
            insert_started_at=timezone.now() - timedelta(seconds=age_s),
        )

    def recorded(vm: str) -> bool:
        return TaggedCheckpoint.objects.filter(guard__vm_name=vm, listed_late_at__isnull=False).exists()

    _hang(sim)
    sweep = in_background(checkpoints_listed_late_sweep)
    wait_until(lambda: recorded("win01") and recorded("edge01"), BOUND_S)
    assert not sweep.done()
    assert not recorded("db01")
    sim.clear_faults()
    report = sweep.result(timeout=BOUND_S)
    assert report.recorded == 3
    assert report.errors == {}


def test_the_identity_refresh_refreshes_the_healthy_sites_while_another_site_hangs(
    sim: Any, sites: dict[str, Site], in_background: Any
) -> None:
    Site.objects.update(last_error="an old error")

    def refreshed(slug: str) -> bool:
        return Site.objects.filter(pk=sites[slug].pk, last_error="").exists()

    _hang(sim)
    sweep = in_background(sites_identity_refresh)
    wait_until(lambda: refreshed("site-b") and refreshed("site-c"), BOUND_S)
    assert not sweep.done()
    assert not refreshed("site-a")
    sim.clear_faults()
    report = sweep.result(timeout=BOUND_S)
    assert report.refreshed == ["Site A", "Site B", "Site C"]
    assert refreshed("site-a")


def test_the_identity_refresh_does_not_ask_a_site_marked_unavailable(
    sim: Any, sites: dict[str, Site], settings: Any
) -> None:
    from rewind.sites.zvm_shared import shared_breaker

    c = sites["site-c"]
    shared_breaker().failed(str(c.pk), c.name, "the ZVM did not answer", at_once=True)
    seen = sim.requests_seen("site-c")
    report = sites_identity_refresh()
    assert report.refreshed == ["Site A", "Site B"]
    assert "unavailable since" in report.failed["Site C"]
    assert sim.requests_seen("site-c") == seen
    c.refresh_from_db()
    assert "unavailable since" in c.last_error


def test_the_dead_poller_sweep_asks_no_zvm_so_a_hung_site_delays_nothing(
    sim: Any, db: None, django_capture_on_commit_callbacks: Any
) -> None:
    # In the test's transaction, so the queued rounds are only captured, never sent to a broker.
    registered = _register(sim)
    for vm, slug in (("web01", "site-a"), ("edge01", "site-c")):
        info = sim.vm(vm)
        guard = ChangeGuard.objects.create(
            agent_name="ops-bot",
            action="edit",
            vm_identifier=info["identifier"],
            vm_name=vm,
            change_id="chg",
            tag=f"tag {vm}",
            timeout_s=60,
        )
        TaggedCheckpoint.objects.create(guard=guard, vpg_identifier=f"vpg-{vm}", vpg_name=vm, site=registered[slug])
    seen = _hang(sim, "site-c")
    with django_capture_on_commit_callbacks() as queued:
        assert pollers_restart_stale() == 2  # no poller chain was ever started for either site
    assert len(work_queued(queued)) == 2
    assert sim.requests_seen("site-c") == seen
    sim.clear_faults()
