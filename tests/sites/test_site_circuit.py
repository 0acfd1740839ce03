"""One stuck ZVM must not stop the rest: per-site circuits against the simulator, on both shared stores.

Behaviour only (which requests the simulator saw, what was refused, what was audited), never timings.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis

from rewind.audit import Actor
from rewind.audit.actions import SiteAction
from rewind.audit.models import AuditEvent
from rewind.protection import SitesUnavailableError, find_protection, protection_cache_clear
from rewind.sites import site_availability, site_circuit, site_client, site_create, site_update, sites_probe
from rewind.sites.api import SiteOutputSerializer
from rewind.sites.circuit import CIRCUIT_PREFIX, circuit_audit_catch_up
from rewind.sites.models import Site, SiteCircuit
from rewind.sites.zvm_shared import shared_breaker
from rewind.zvm import ZvmAuthError, ZvmNotFoundError, ZvmSiteUnavailable, ZvmTransientError, ZvmUnparseableResponse
from tests.fixtures import make_sites
from tests.workerenv import private_redis_url

REDIS_URL = private_redis_url(1)  # a database of its own beside the suite's (tests.workerenv)
ADMIN = Actor.user("alice")


def _flush(client: redis.Redis) -> None:
    for key in client.scan_iter(match="rewind:zvm:*"):
        client.delete(key)


@pytest.fixture(params=["db", "redis"])
def store(request: pytest.FixtureRequest, transactional_db: None, settings: Any) -> Iterator[str]:
    """The shared store the circuits live in: the database, or a Redis database of its own."""
    settings.ZVM_CONNECT_TIMEOUT_S = 0.5
    settings.ZVM_READ_TIMEOUT_S = 0.5
    settings.ZVM_CIRCUIT_PROBE_S = 0.2
    settings.ZVM_CIRCUIT_PROBE_MAX_S = 0.4
    settings.ZVM_CIRCUIT_AUDIT_QUIET_S = 0
    settings.REWIND_LOOKUP_CACHE_S = 0
    client = None
    if request.param == "redis":
        client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=1)
        try:
            client.ping()
        except redis.RedisError:
            pytest.skip("no Redis server answers at 127.0.0.1:6379")
        _flush(client)
        settings.ZVM_SHARED_REDIS_URL = REDIS_URL
    else:
        settings.ZVM_SHARED_REDIS_URL = None
    protection_cache_clear()
    yield str(request.param)
    protection_cache_clear()
    if client is not None:
        _flush(client)
        client.close()


@pytest.fixture
def sites(sim: Any, store: str) -> dict[str, Site]:
    return make_sites(sim)  # once the store is chosen: the checks' circuits live there


def _audits(site: Site, action: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action=action, target_id=str(site.pk)).order_by("seq"))


def _trial_due_now(store: str, site: Site) -> None:
    """Bring the open circuit's next trial forward to now (instead of sleeping a probe period)."""
    if store == "db":
        SiteCircuit.objects.filter(site=site).update(next_trial_at=0.0)
    else:
        redis.Redis.from_url(REDIS_URL).hset(CIRCUIT_PREFIX + str(site.pk), "next_trial_at", 0)


def test_a_hung_site_opens_after_one_timeout_and_is_not_asked_again_until_a_probe_closes_it(
    sim: Any, sites: dict[str, Site], store: str, settings: Any
) -> None:
    # A probe period far longer than the test: no trial may fall due on a slow machine, so
    # every call below is refused without reaching the hung site.
    settings.ZVM_CIRCUIT_PROBE_S = 600
    settings.ZVM_CIRCUIT_PROBE_MAX_S = 1200
    c = sites["site-c"]
    sim.add_fault("hang", site="site-c", seconds=5, path_regex=".*")

    first = find_protection("web01")  # protected at Site A: complete although Site C hangs
    assert [v.name for v in first.vpgs] == ["vpg-web", "vpg-web-dr"]
    assert first.unavailable_sites == ("Site C",)
    state = site_circuit(c)
    assert state.is_open
    assert "did not answer" in state.reason
    [opened] = _audits(c, SiteAction.UNAVAILABLE)
    assert "did not answer" in opened.data["reason"]

    seen = sim.requests_seen("site-c")
    again = find_protection("app01")
    assert again.unavailable_sites == ("Site C",)
    assert len(again.vpgs) == 3
    with pytest.raises(SitesUnavailableError, match="Site C") as refused:
        find_protection("edge01")  # protected at Site C itself
    assert refused.value.sites == ("Site C",)
    with pytest.raises(ZvmSiteUnavailable, match=r"unavailable since .* did not answer"):
        site_client(c).list_vpgs()
    assert sim.requests_seen("site-c") == seen  # none of these reached the hung site

    availability = site_availability(c)
    assert availability["available"] is False
    assert "did not answer" in str(availability["reason"])
    assert SiteOutputSerializer(c).data["availability"]["available"] is False

    sim.clear_faults()
    assert "Site C" in sites_probe().skipped  # its trial is not due yet
    _trial_due_now(store, c)
    report = sites_probe()
    assert report.probed == {"Site C": "available"}
    assert not site_circuit(c).is_open
    assert len(_audits(c, SiteAction.AVAILABLE)) == 1
    assert find_protection("edge01").unavailable_sites == ()


def test_a_probe_that_fails_keeps_it_open_and_one_trial_per_period_is_let_through(
    sim: Any, sites: dict[str, Site], store: str, settings: Any
) -> None:
    settings.ZVM_CIRCUIT_PROBE_S = 600  # periods far longer than the test: trials come only when brought forward
    settings.ZVM_CIRCUIT_PROBE_MAX_S = 1200
    c = sites["site-c"]
    sim.add_fault("hang", site="site-c", seconds=5, path_regex=".*")
    with pytest.raises(ZvmTransientError):
        site_client(c).list_vpgs()
    _trial_due_now(store, c)  # as if the first period had passed: one trial is due
    trial = site_client(c)
    with pytest.raises(ZvmTransientError) as caught:
        trial.list_vpgs()  # this caller is the trial: it waits for the stuck ZVM once
    assert not isinstance(caught.value, ZvmSiteUnavailable)
    seen = sim.requests_seen("site-c")
    with pytest.raises(ZvmSiteUnavailable):
        trial.list_vpgs()  # the next period is longer: refused at once
    assert sim.requests_seen("site-c") == seen
    assert site_circuit(c).is_open


def test_rejected_stored_credentials_open_the_circuit_and_say_so(sim: Any, store: str) -> None:
    site = site_create(
        actor=ADMIN, name="Site A", base_url=sim.site_url("site-a"), username="admin", password="not-the-password"
    )
    client = site_client(site)
    for _ in range(3):  # ZVM_CIRCUIT_FAILURES
        with pytest.raises(ZvmAuthError, match="rejected the credentials"):
            client.list_vpgs()
    seen = sim.requests_seen("site-a")
    with pytest.raises(ZvmSiteUnavailable, match="rejected the credentials"):
        client.list_vpgs()
    assert sim.requests_seen("site-a") == seen


@pytest.mark.parametrize("status", [500, 502])
def test_5xx_answers_open_the_circuit(sim: Any, sites: dict[str, Site], status: int) -> None:
    sim.add_fault("http_error", site="site-b", status=status, path_regex="/v1/vpgs$")
    client = site_client(sites["site-b"])
    for _ in range(3):
        with pytest.raises(ZvmTransientError, match=f"HTTP {status}"):
            client.list_vpgs()
    with pytest.raises(ZvmSiteUnavailable, match=f"HTTP {status}"):
        client.list_vpgs()


def test_an_answer_that_is_not_json_opens_the_circuit(sim: Any, sites: dict[str, Site]) -> None:
    # A 2xx whose body is an object where the API documents a JSON string (the task id).
    sim.add_fault("http_error", site="site-b", status=200, path_regex="/checkpoints$", message="garbage")
    client = site_client(sites["site-b"])
    for _ in range(3):
        with pytest.raises(ZvmUnparseableResponse, match="not a JSON string"):
            client.insert_tagged_checkpoint("any-vpg", "tag")
    with pytest.raises(ZvmSiteUnavailable, match="not a JSON string"):
        client.list_vpgs()


def test_404_and_400_answers_do_not_count(sim: Any, sites: dict[str, Site]) -> None:
    client = site_client(sites["site-a"])
    for _ in range(5):
        with pytest.raises(ZvmNotFoundError):
            client.get_vpg("no-such-vpg")
    sim.add_fault("http_error", site="site-a", status=400, path_regex="/v1/vpgs$", count=5)
    for _ in range(5):
        with pytest.raises(Exception, match="HTTP 400"):
            client.list_vpgs()
    assert not site_circuit(sites["site-a"]).is_open
    assert client.list_vpgs()


def test_disabling_a_site_refuses_every_client_of_it_at_once(sim: Any, sites: dict[str, Site]) -> None:
    a = sites["site-a"]
    client = site_client(a)  # made before the change, as another process's would be
    client.list_vpgs()
    site_update(actor=ADMIN, site=Site.objects.get(pk=a.pk), enabled=False)
    seen = sim.requests_seen("site-a")
    with pytest.raises(ZvmSiteUnavailable, match="disabled"):
        client.list_vpgs()
    assert sim.requests_seen("site-a") == seen
    site_update(actor=ADMIN, site=Site.objects.get(pk=a.pk), enabled=True)
    assert client.list_vpgs()


def test_a_flapping_site_is_audited_once_then_summarised(sim: Any, sites: dict[str, Site], settings: Any) -> None:
    settings.ZVM_CIRCUIT_AUDIT_QUIET_S = 3600
    b = sites["site-b"]
    breaker, key = shared_breaker(), str(b.pk)
    for _ in range(5):
        breaker.failed(key, b.name, "the ZVM did not answer", at_once=True)
        breaker.answered(key, b.name)
    breaker.failed(key, b.name, "the ZVM did not answer", at_once=True)
    assert len(_audits(b, SiteAction.UNAVAILABLE)) == 1  # the first open only
    assert _audits(b, SiteAction.AVAILABLE) == []
    settings.ZVM_CIRCUIT_AUDIT_QUIET_S = 0
    assert circuit_audit_catch_up(breaker, b)
    summary = _audits(b, SiteAction.UNAVAILABLE)[-1]
    assert summary.data["summary"] is True
    assert summary.data["flaps_since_last"] == 10


@pytest.mark.parametrize("store", ["redis"], indirect=True)
def test_the_redis_circuit_is_what_other_processes_see(sim: Any, sites: dict[str, Site], store: str) -> None:
    c = sites["site-c"]
    sim.add_fault("hang", site="site-c", seconds=5, path_regex=".*")
    with pytest.raises(ZvmTransientError):
        site_client(c).list_vpgs()
    raw = redis.Redis.from_url(REDIS_URL).hgetall(CIRCUIT_PREFIX + str(c.pk))
    assert raw[b"state"] == b"open"


def test_a_new_site_starts_closed_whatever_an_earlier_site_with_its_id_left(sim: Any, store: str) -> None:
    """Redis (or a restored database) may outlive the site a circuit was kept for; the id comes back."""
    first = site_create(actor=ADMIN, name="first", base_url="https://zvm-1.example.test")
    breaker, stale = shared_breaker(), str(first.pk + 1)
    breaker.failed(stale, "gone", "the ZVM did not answer", at_once=True)
    breaker.set_disabled(stale, True)
    neighbour = str(first.pk + 2)
    breaker.failed(neighbour, "other", "the ZVM did not answer", at_once=True)

    second = site_create(actor=ADMIN, name="second", base_url="https://zvm-2.example.test")
    assert str(second.pk) == stale, "each test database numbers its sites in order"
    state = site_circuit(second)
    assert not state.is_open
    assert not state.disabled
    assert breaker.admit(stale) is None
    if store == "redis":  # only what was under the new site's id is forgotten
        assert breaker.state(neighbour).is_open


def test_a_site_created_disabled_is_refused_by_every_process(sim: Any, store: str) -> None:
    site = site_create(actor=ADMIN, name="off", base_url="https://zvm-3.example.test", enabled=False)
    refused = shared_breaker().admit(str(site.pk))
    assert refused is not None
    assert refused.disabled
