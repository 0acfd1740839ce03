"""Checks by people (admin "Test connection", manage.py zvm_check, POST /api/sites/<id>/check/) with a hung site.

A site marked unavailable is not waited for again: the check says since when and why at once,
unless forced. zvm_check asks every site at once and prints each as it answers. Outcomes only
(what was printed, which requests the simulator saw), never timings.
"""

from __future__ import annotations

import io
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client

from rewind.audit import Actor
from rewind.sites import site_check, site_circuit, site_client, site_create
from rewind.sites.models import Site
from rewind.zvm import ZvmTransientError
from tests.fixtures import wait_until
from tests.simfixtures import PASSWORD

pytestmark = pytest.mark.timeout(300)
SLUGS = {"site-a": "Site A", "site-b": "Site B", "site-c": "Site C"}


@pytest.fixture
def sites(sim: Any, transactional_db: None, settings: Any) -> dict[str, Site]:
    settings.ZVM_CIRCUIT_PROBE_S = 600  # no trial falls due during a test: only a forced check asks
    settings.ZVM_CIRCUIT_PROBE_MAX_S = 1200
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
def hung_c(sim: Any, sites: dict[str, Site], settings: Any) -> int:
    """Site C hangs and has been marked unavailable by one timed-out call; the requests it saw."""
    settings.ZVM_CONNECT_TIMEOUT_S = settings.ZVM_READ_TIMEOUT_S = 0.5
    sim.add_fault("hang", site="site-c", seconds=3600, path_regex=".*")
    with pytest.raises(ZvmTransientError, match="did not answer"):
        site_client(sites["site-c"]).local_site()
    assert site_circuit(sites["site-c"]).is_open
    return sim.requests_seen("site-c")


def test_a_check_of_a_site_marked_unavailable_says_since_when_without_asking_it(
    sim: Any, sites: dict[str, Site], hung_c: int
) -> None:
    c = sites["site-c"]
    result = site_check(site=c)
    assert not result.ok
    assert not result.asked
    assert result.error.startswith("unavailable since ")
    assert "did not answer" in result.error
    assert Site.objects.get(pk=c.pk).last_error == ""  # nothing was asked, so nothing is recorded
    assert sim.requests_seen("site-c") == hung_c


def test_the_admin_test_connection_reports_every_site_without_waiting_for_the_unavailable_one(
    sim: Any, sites: dict[str, Site], hung_c: int
) -> None:
    User.objects.create_superuser("alice", "a@example.com", "pw-alice-1")
    client = Client()
    client.force_login(User.objects.get(username="alice"))
    response = client.post(
        "/admin/rewind/site/",
        {"action": "test_connection", "_selected_action": [s.pk for s in sites.values()]},
        follow=True,
    )
    page = response.content.decode()
    assert "Site A: OK" in page
    assert "Site B: OK" in page
    assert "Site C: unavailable since" in page
    assert sim.requests_seen("site-c") == hung_c


def test_the_api_check_says_it_did_not_ask_unless_forced(sim: Any, sites: dict[str, Site], hung_c: int) -> None:
    User.objects.create_superuser("root", "r@example.com", "pw-root-1")
    client = Client()
    client.force_login(User.objects.get(username="root"))
    url = f"/api/sites/{sites['site-c'].pk}/check/"
    body = client.post(url).json()
    assert body["ok"] is False
    assert body["asked"] is False
    assert "unavailable since" in body["error"]
    assert sim.requests_seen("site-c") == hung_c
    forced = client.post(url, {"force": True}, content_type="application/json").json()
    assert forced["asked"] is True
    assert "did not answer" in forced["error"]
    assert sim.requests_seen("site-c") == hung_c + 1


def test_zvm_check_says_at_once_which_site_is_unavailable_and_asks_it_only_when_forced(
    sim: Any, sites: dict[str, Site], hung_c: int
) -> None:
    out = io.StringIO()
    with pytest.raises(CommandError, match="1 of 3 sites failed"):
        call_command("zvm_check", stdout=out)
    text = out.getvalue()
    assert "Site A: OK" in text
    assert "Site B: OK" in text
    assert "Site C: UNAVAILABLE  unavailable since " in text
    assert sim.requests_seen("site-c") == hung_c

    forced = io.StringIO()
    with pytest.raises(CommandError, match="1 of 1 sites failed"):
        call_command("zvm_check", "--site", "Site C", "--force", stdout=forced)
    assert "Site C: FAILED" in forced.getvalue()
    assert "did not answer" in forced.getvalue()
    assert sim.requests_seen("site-c") == hung_c + 1  # one request, bounded by the client's timeout

    sim.clear_faults()
    healed = io.StringIO()
    call_command("zvm_check", "--site", "Site C", "--force", stdout=healed)
    assert "Site C: was unavailable since" in healed.getvalue()
    assert "Site C: OK" in healed.getvalue()
    assert not site_circuit(sites["site-c"]).is_open


def test_zvm_check_prints_each_site_as_it_answers_while_another_hangs(
    sim: Any, sites: dict[str, Site], settings: Any
) -> None:
    settings.ZVM_READ_TIMEOUT_S = 120  # a bound never reached: the hang ends when the test clears it
    sim.add_fault("hang", site="site-a", seconds=3600, path_regex=".*")  # the first site in order
    out = io.StringIO()
    with ThreadPoolExecutor(max_workers=1) as pool:
        check = pool.submit(call_command, "zvm_check", stdout=out)
        wait_until(
            lambda: "Site B: OK" in out.getvalue() and "Site C: OK" in out.getvalue(),
            60,
            what=lambda: f"the healthy sites reported: {out.getvalue()!r}",
        )
        assert "Site A" not in out.getvalue()  # still asking it: the others did not wait
        assert not check.done()
        sim.clear_faults()
        check.result(timeout=60)
    assert "Site A: OK" in out.getvalue()
