"""find_protection against the simulator: matching order, dedupe, insert rules, bounded cost."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from rewind.lib.errors import ApplicationError
from rewind.lib.requestid import bound_request_id
from rewind.protection import (
    SitesUnavailableError,
    VmAmbiguousError,
    VmNotFoundError,
    find_protection,
    protection_cache_clear,
)
from rewind.zvm import VmList
from tests.fixtures import register_sites, wait_until
from tests.helpers import calls
from tests.localzvm import serve


@pytest.fixture(autouse=True)
def _fresh_cache(settings: Any) -> Iterator[None]:
    settings.REWIND_LOOKUP_CACHE_S = 60.0
    protection_cache_clear()
    yield
    protection_cache_clear()


@pytest.fixture
def two_sites(db: None, sim: Any) -> dict[str, Any]:
    return register_sites(sim, {"Site A": "site-a", "Site B": "site-b"})


def no_dns(host: str) -> list[str]:
    raise AssertionError(f"DNS was asked for {host} although a name matched")


def test_it_matches_the_exact_vm_name_and_dedupes_rows_of_both_sites(sim: Any, two_sites: Any) -> None:
    found = find_protection("web01", resolver=no_dns)
    assert found.vm_identifier == sim.vm("web01")["identifier"]
    assert [v.name for v in found.vpgs] == ["vpg-web", "vpg-web-dr"]
    assert len({v.identifier for v in found.vpgs}) == 2


def test_it_matches_a_vm_identifier(sim: Any, two_sites: Any) -> None:
    identifier = sim.vm("app01")["identifier"]
    found = find_protection(identifier, resolver=no_dns)
    assert found.vm_name == "app01"
    assert [v.name for v in found.vpgs] == ["vpg-app-1", "vpg-app-2", "vpg-app-3"]


def test_it_matches_the_short_name_of_an_fqdn(two_sites: Any) -> None:
    assert find_protection("db01.corp.example.com", resolver=no_dns).vm_name == "db01"


def test_it_resolves_a_hostname_and_matches_the_vm_ip(two_sites: Any) -> None:
    asked: list[str] = []

    def resolver(host: str) -> list[str]:
        asked.append(host)
        return ["10.0.0.21"] if host == "fileserver.corp.example" else []

    found = find_protection("fileserver.corp.example", resolver=resolver)
    assert found.vm_name == "win01"
    assert asked == ["fileserver.corp.example"]
    assert [v.name for v in found.vpgs] == ["vpg-win"]


def test_it_matches_an_ip_address_without_dns(two_sites: Any) -> None:
    assert find_protection("10.0.0.12", resolver=no_dns).vm_name == "app01"


def test_it_reads_each_site_s_full_vm_list_once_per_cache_period(sim: Any, two_sites: Any) -> None:
    ips = {"apphost": "10.0.0.12", "dbhost": "10.0.0.13", "webhost": "10.0.0.11"}
    find_protection("web01")  # logs in (a token kept from an earlier test died with the simulator's reset)
    before = sim.calls("site-a").get("GET /v1/vms", 0)
    for host in ips:
        find_protection(host, resolver=lambda h: [ips[h]])
    # The first host: a filtered name look-up, then one unfiltered listing for the IP index;
    # the other hosts are looked for in that listing, kept for the cache period.
    assert sim.calls("site-a").get("GET /v1/vms", 0) - before == 2


def test_a_burst_of_look_ups_at_a_site_reads_its_vm_list_once(sim: Any, two_sites: Any) -> None:
    from rewind.protection.state import BURST_QUERIES

    find_protection("db01")  # logs in, and is the first query at each site
    before = sim.calls("site-a").get("GET /v1/vms", 0)
    names = ["web01", "app01", "win01", "edge01", "file01"]
    found = {}
    for name in names:
        try:
            found[name] = find_protection(name, resolver=lambda h: []).vm_name
        except VmNotFoundError:
            found[name] = None
    spent = sim.calls("site-a").get("GET /v1/vms", 0) - before
    # BURST_QUERIES queries in a cache period, then one listing of every VM answers the rest.
    assert spent == BURST_QUERIES - 1 + 1, spent
    assert found["web01"] == "web01"
    assert found["app01"] == "app01"
    with pytest.raises(VmNotFoundError):
        find_protection("ghost01", resolver=lambda h: [])
    assert sim.calls("site-a").get("GET /v1/vms", 0) - before == spent, "answered from the listing"


def _site_list_at_hand(sim: Any) -> int:
    """Look-ups enough for site-a to read its whole VM list; the GET /v1/vms it has counted since."""
    from rewind.protection.state import BURST_QUERIES

    for name in ["db01", "web01", "app01", "win01", "edge01"][: BURST_QUERIES + 2]:
        try:
            find_protection(name, resolver=lambda h: [])
        except VmNotFoundError:
            pass
    return sim.calls("site-a").get("GET /v1/vms", 0)


def test_names_identifiers_and_addresses_are_answered_from_the_site_list(sim: Any, two_sites: Any) -> None:
    spent = _site_list_at_hand(sim)
    web01 = find_protection("WEB01", resolver=no_dns)
    assert web01.vm_name == "web01"
    assert find_protection(web01.vm_identifier, resolver=no_dns).vm_name == "web01"
    assert find_protection("10.0.0.12", resolver=no_dns).vm_name == "app01"
    with pytest.raises(VmNotFoundError):
        find_protection("10.9.9.9", resolver=no_dns)
    assert sim.calls("site-a").get("GET /v1/vms", 0) == spent, "every answer came from the list at hand"


def test_an_answer_from_the_site_list_never_outlives_the_list(sim: Any, two_sites: Any) -> None:
    from rewind.models import Site
    from rewind.protection import state

    _site_list_at_hand(sim)
    assert find_protection("web01", resolver=no_dns).vm_name == "web01"
    assert find_protection("10.0.0.11", resolver=no_dns).vm_name == "web01"
    # The next fetch of each list no longer holds web01 (say it was unprotected meanwhile).
    for site in Site.objects.all():
        assert state.cache.fresh(("all", site.pk)), f"{site.name}'s list is at hand"
        slug = site.base_url.rstrip("/").rsplit("/", 1)[1]
        listed = sim.http.get(
            f"{sim.site_url(slug)}/v1/vms", headers={"Authorization": f"Bearer {sim.token(slug)}"}, timeout=30
        ).json()
        assert any(row["VmName"] == "web01" for row in listed)
        state.cache.put(("all", site.pk), 60.0, VmList([row for row in listed if row["VmName"] != "web01"]))
    for query in ("web01", "10.0.0.11"):
        with pytest.raises(VmNotFoundError):
            find_protection(query, resolver=lambda h: [])


def test_it_caches_name_lookups_per_site(sim: Any, two_sites: Any) -> None:
    find_protection("db01")
    after_first = sim.calls("site-b").get("GET /v1/vms", 0)
    find_protection("db01")
    find_protection("DB01")
    assert sim.calls("site-b").get("GET /v1/vms", 0) == after_first


def test_it_refuses_an_unknown_vm(two_sites: Any) -> None:
    with pytest.raises(VmNotFoundError, match="no protected VM matches 'ghost01'"):
        find_protection("ghost01", resolver=lambda h: [])


def test_it_lists_both_candidates_of_an_ambiguous_name(sim: Any, two_sites: Any) -> None:
    with pytest.raises(VmAmbiguousError) as caught:
        find_protection("dup01")
    assert len(caught.value.candidates) == 2
    assert all(c.name == "dup01" and c.sites == ("Site A", "Site B") for c in caught.value.candidates)
    for candidate in caught.value.candidates:
        assert candidate.identifier in caught.value.message
        # The identifier is unambiguous.
        assert find_protection(candidate.identifier).vm_identifier == candidate.identifier


def test_it_says_why_a_checkpoint_cannot_be_inserted(two_sites: Any) -> None:
    cloud = find_protection("cloud01").vpgs[0]
    assert cloud.protected_site.type == "AWS"
    assert not cloud.can_insert_checkpoint
    assert "AWS" in (cloud.cannot_insert_reason or "")
    syncing = find_protection("newvm01").vpgs[0]
    assert not syncing.can_insert_checkpoint
    assert "initial sync" in (syncing.cannot_insert_reason or "")
    edge = find_protection("edge01").vpgs[0]
    assert edge.protected_site.name == "Site C"
    assert edge.protected_site.configured is False
    assert edge.recovery_site.configured is True
    assert edge.recovery_site.site_pk == two_sites["Site B"].pk
    assert edge.cannot_insert_reason == "the ZVM of protected site Site C is not configured here"
    assert find_protection("win01").vpgs[0].can_insert_checkpoint


def test_it_marks_a_recovery_site_that_is_not_configured(two_sites: Any) -> None:
    app3 = next(v for v in find_protection("app01").vpgs if v.name == "vpg-app-3")
    assert app3.recovery_site.name == "Site C"
    assert app3.recovery_site.configured is False
    assert app3.can_insert_checkpoint  # the protected site's ZVM is what inserts


def test_a_vm_whose_own_site_answered_is_complete_and_names_the_site_it_could_not_ask(sim: Any, two_sites: Any) -> None:
    sim.add_fault("http_error", site="site-b", status=500, path_regex="/v1/vms")
    found = find_protection("db01")  # protected at Site A, which answered
    assert [v.name for v in found.vpgs] == ["vpg-db"]
    assert found.unavailable_sites == ("Site B",)
    assert "Site B" in (found.note or "")


def test_a_vm_whose_own_site_could_not_be_asked_is_refused_naming_it(sim: Any, two_sites: Any) -> None:
    sim.add_fault("http_error", site="site-b", status=500, path_regex="/v1/vms")
    with pytest.raises(SitesUnavailableError, match="Site B") as caught:
        find_protection("win01")  # protected at Site B; Site A lists it as the recovery site only
    assert caught.value.sites == ("Site B",)


def test_a_vm_no_answering_site_knows_names_the_sites_not_asked_instead_of_not_found(sim: Any, two_sites: Any) -> None:
    sim.add_fault("http_error", site="site-b", status=500, path_regex="/v1/vms")
    with pytest.raises(SitesUnavailableError, match=r"could not be asked.*Site B"):
        find_protection("no-such-vm", resolver=lambda host: [])


def test_it_refuses_an_empty_query(two_sites: Any) -> None:
    with pytest.raises(ApplicationError, match="give a VM name"):
        find_protection("  ")


def test_it_needs_a_configured_site(db: None) -> None:
    with pytest.raises(ApplicationError, match="no ZVM site is configured"):
        find_protection("web01")


def test_it_sends_the_bound_request_id_to_the_zvm(db: None) -> None:
    from rewind.audit import Actor
    from rewind.sites import site_create

    row = {
        "VmIdentifier": "srv.vm-1",
        "VmName": "solo01",
        "VpgIdentifier": "vpg-1",
        "VpgName": "vpg-solo",
        "Status": 1,
        "SubStatus": 0,
        "ProtectedSite": {"identifier": "site-x", "type": "LocalSiteApi"},
        "RecoverySite": {"identifier": "site-y", "type": "PeerSiteApi"},
        "EnabledActions": {"IsFlrEnabled": True},
    }
    for zvm in serve():
        zvm.routes[("GET", "/v1/vms")] = (200, [row])
        zvm.routes[("GET", "/v1/localsite")] = (
            200,
            {"SiteIdentifier": "site-x", "SiteName": "X", "SiteType": "VCenter"},
        )
        zvm.routes[("GET", "/v1/peersites")] = (200, [])
        zvm.routes[("GET", "/v1/vpgs/statuses")] = (200, ["Initializing", "MeetingSLA"])
        zvm.routes[("GET", "/v1/vpgs/substatuses")] = (200, ["None", "InitialSync"])
        site_create(actor=Actor.system("tests"), name="X", base_url=zvm.url, username="u", password="p")
        with bound_request_id("req-0123456789") as rid:
            found = find_protection("solo01")
        assert found.vpgs[0].status_name == "MeetingSLA"
        v1 = [s for s in zvm.seen if "/v1/" in s.path]
        assert v1
        assert {s.headers.get("X-Request-ID") for s in v1} == {rid}


def test_it_asks_every_time_with_the_cache_off(sim: Any, two_sites: Any, settings: Any) -> None:
    settings.REWIND_LOOKUP_CACHE_S = 0
    find_protection("db01")
    before = sim.calls("site-a").get("GET /v1/vms", 0)
    find_protection("db01")
    assert sim.calls("site-a").get("GET /v1/vms", 0) == before + 1
    sim.add_fault("http_error", site="site-b", status=500, path_regex="/v1/vms")
    assert find_protection("db01").unavailable_sites == ("Site B",)  # asked again, not a cached answer


def _calls_reach(sim: Any, count: int) -> int:
    """GET /v1/vms as site-a counted it, once it reached ``count`` (a background refresh ran)."""
    wait_until(lambda: calls(sim, "site-a", "GET /v1/vms") >= count, 10, what=f"{count} x GET /v1/vms on site-a")
    return calls(sim, "site-a", "GET /v1/vms")


def test_a_list_read_in_the_second_half_of_its_time_is_fetched_again_before_it_expires(
    sim: Any, two_sites: Any
) -> None:
    from rewind.protection import state

    now = [1000.0]
    state.cache.clock = lambda: now[0]
    try:
        spent = _site_list_at_hand(sim)  # the whole list, kept 60 s
        now[0] += 20
        assert find_protection("web01", resolver=no_dns).vm_name == "web01"
        assert sim.calls("site-a").get("GET /v1/vms", 0) == spent, "in the first half: kept as it is"
        now[0] += 15  # 35 s old: answered from it at once, and fetched again behind the answer
        assert find_protection("app01", resolver=no_dns).vm_name == "app01"
        assert _calls_reach(sim, spent + 1) == spent + 1
        now[0] += 28  # past the first fetch's 60 s, in the first half of the second's
        # The simulator counts the refresh when it is asked, before the list is kept: wait until
        # it is (the first list has expired by now), or the look-up asks the ZVM by name meanwhile.
        wait_until(lambda: state.cache.fresh(("all", two_sites["Site A"].pk)), 10, what="the refreshed list kept")
        assert find_protection("web01", resolver=no_dns).vm_name == "web01"
        assert sim.calls("site-a").get("GET /v1/vms", 0) == spent + 1, "the refreshed list answered"
    finally:
        state.cache.clock = time.monotonic


def test_a_refresh_that_fails_leaves_the_value_to_expire_and_the_next_reader_loads_it() -> None:
    from rewind.protection.cache import TtlCache

    now = [0.0]
    cache = TtlCache(clock=lambda: now[0], background=lambda job: job())
    assert cache.get("k", 10, lambda: "first") == "first"

    def broken() -> str:
        raise ConnectionError("the ZVM is away")

    now[0] = 6
    assert cache.get("k", 10, broken) == "first", "the refresh failed behind a value still fresh"
    now[0] = 9.9
    assert cache.get("k", 10, lambda: "second") == "first", "still fresh; refreshed now"
    now[0] = 10.5  # the first value's time is over; the refreshed one (from 9.9) holds
    assert cache.get("k", 10, broken) == "second"
    now[0] = 20
    with pytest.raises(ConnectionError):  # nothing older than its time is handed out
        cache.get("k", 10, broken)
