"""/metrics: who may read it, and that what it shows is read from what every process shares."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from recoveries.models import FlrSession, RecoveryRequest
from recoveries.reaper import recoveries_reap
from rewind.audit import Actor, audit_record
from rewind.audit.actions import McpAction, RecoveryAction
from rewind.checkpoints.models import ChangeGuard
from rewind.metrics import collectors
from rewind.sites import site_check, site_create
from rewind.sites.models import Site
from tests.helpers import METRICS_TOKEN, scrape, value
from tests.simfixtures import PASSWORD

SETUP = Actor.system("tests")


@pytest.fixture
def token(settings: Any) -> str:
    settings.REWIND_METRICS_TOKEN = METRICS_TOKEN
    settings.REWIND_METRICS_ALLOWED_NETWORKS = []
    return METRICS_TOKEN


def make_site(sim: Any, name: str | None = None, base_url: str | None = None) -> Site:
    # A name of its own: with Redis the counts outlive the test's transaction.
    return site_create(
        actor=SETUP,
        name=name or f"Metrics {uuid.uuid4().hex[:8]}",
        base_url=base_url or sim.site_url("site-a"),
        username="admin",
        password=PASSWORD,
    )


def guard(status: str, waited_s: float, n: int) -> ChangeGuard:
    row = ChangeGuard.objects.create(
        agent_name="fixer", action="edit", vm_identifier=f"vm-{n}", vm_name="web01", change_id=f"c-{n}", tag=f"t-{n}",
        status=status, timeout_s=300,
    )  # fmt: skip
    now = timezone.now()
    ChangeGuard.objects.filter(pk=row.pk).update(requested_at=now - timedelta(seconds=waited_s), finished_at=now)
    return row


@pytest.mark.django_db
def test_it_refuses_everyone_while_neither_token_nor_network_is_set(client: Client, settings: Any) -> None:
    settings.REWIND_METRICS_TOKEN = None
    settings.REWIND_METRICS_ALLOWED_NETWORKS = []
    response = client.get("/metrics", headers={"Authorization": "Bearer anything"})
    assert response.status_code == 403
    assert b"REWIND_METRICS_TOKEN" in response.content


@pytest.mark.django_db
def test_it_refuses_a_missing_or_wrong_token(client: Client, token: str) -> None:
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {token}"}):
        response = client.get("/metrics", headers=headers)
        assert response.status_code == 401
        assert response["WWW-Authenticate"] == 'Bearer realm="metrics"'
        assert token.encode() not in response.content
        assert b"rewind_" not in response.content


@pytest.mark.django_db
def test_it_serves_an_allowed_network_and_refuses_others(client: Client, settings: Any) -> None:
    import ipaddress

    settings.REWIND_METRICS_TOKEN = None
    settings.REWIND_METRICS_ALLOWED_NETWORKS = [ipaddress.ip_network("10.0.0.0/8")]
    assert client.get("/metrics").status_code == 403  # the test client is 127.0.0.1
    settings.REWIND_METRICS_ALLOWED_NETWORKS = [ipaddress.ip_network("127.0.0.0/8")]
    assert client.get("/metrics").status_code == 200
    settings.REWIND_METRICS_TOKEN = METRICS_TOKEN  # both set: both needed
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}).status_code == 200


@pytest.mark.django_db
def test_it_shows_guards_by_outcome_and_how_long_they_waited(client: Client, token: str) -> None:
    guard("ok", 3, 1)
    guard("ok", 45, 2)
    guard("failed", 400, 3)
    ChangeGuard.objects.create(
        agent_name="fixer", action="edit", vm_identifier="vm-4", vm_name="web01", change_id="c-4", tag="t-4",
        status="running", timeout_s=300,
    )  # fmt: skip
    samples = scrape(client)
    assert value(samples, "rewind_guards_total", status="ok") == 2
    assert value(samples, "rewind_guards_total", status="failed") == 1
    assert value(samples, "rewind_guards_unfinished", status="running") == 1
    assert value(samples, "rewind_guard_wait_seconds_bucket", status="ok", le="2.0") == 0
    assert value(samples, "rewind_guard_wait_seconds_bucket", status="ok", le="5.0") == 1
    assert value(samples, "rewind_guard_wait_seconds_bucket", status="ok", le="60.0") == 2
    assert value(samples, "rewind_guard_wait_seconds_bucket", status="failed", le="300.0") == 0
    assert value(samples, "rewind_guard_wait_seconds_bucket", status="failed", le="+Inf") == 1
    assert value(samples, "rewind_guard_wait_seconds_count", status="ok") == 2
    assert value(samples, "rewind_guard_wait_seconds_sum", status="ok") == pytest.approx(48, abs=0.5)


# Transactional: only then do the test's ZVM clients use the stores every process shares (tests/conftest.py).
@pytest.mark.django_db(transaction=True)
def test_it_counts_zvm_requests_by_site_and_result(client: Client, token: str, sim: Any) -> None:
    site = make_site(sim)
    before = scrape(client)
    assert site_check(site=site).ok  # a login and a few GETs, all answered
    dead = make_site(sim, base_url="https://127.0.0.1:1")  # nothing listens there
    assert not site_check(site=dead).ok
    after = scrape(client)
    answered = value(after, "rewind_zvm_requests_total", site=site.name, result="2xx")
    assert answered - value(before, "rewind_zvm_requests_total", site=site.name, result="2xx") >= 2
    assert value(after, "rewind_zvm_requests_total", site=dead.name, result="connect_error") >= 1
    assert value(after, "rewind_metrics_source_up", source="zvm_requests") == 1


@pytest.mark.django_db
def test_it_shows_pending_approvals_and_our_live_sessions(client: Client, token: str, sim: Any) -> None:
    site = make_site(sim)
    pending = RecoveryRequest.objects.create(
        agent_name="fixer", vm_identifier="vm-1", vm_name="web01", path="/etc/x", normalized_path="/etc/x",
        os="linux", reason="r", checkpoint_identifier="cp", checkpoint_source="latest_tagged", vpg_identifier="vpg",
        vpg_name="vpg", recovery_site_identifier="s", expires_at=timezone.now() + timedelta(hours=1),
    )  # fmt: skip
    for status in (FlrSession.Status.MOUNTED, FlrSession.Status.UNMOUNT_FAILED, FlrSession.Status.ENDED):
        FlrSession.objects.create(
            site=site, recovery=pending, session_id=f"s-{status}", vm_identifier="vm-1", vpg_identifier="vpg",
            checkpoint_identifier="cp", status=status, attempt={"mounted": 1, "unmount_failed": 2, "ended": 3}[status],
        )  # fmt: skip
    samples = scrape(client)
    assert value(samples, "rewind_recoveries_awaiting_approval") == 1
    assert value(samples, "rewind_flr_sessions_live", site=site.name, owner="ours") == 2
    assert (site.name, "foreign") not in {(dict(k[1]).get("site"), dict(k[1]).get("owner")) for k in samples}


@pytest.mark.django_db(transaction=True)
def test_it_shows_other_operators_sessions_from_the_reapers_last_listing(client: Client, token: str, sim: Any) -> None:
    site = make_site(sim, base_url=sim.site_url("site-b"))  # web01's recovery site
    sim.open_foreign_session("site-b", "web01", "vpg-web")
    sim.open_foreign_session("site-b", "web01", "vpg-web")
    recoveries_reap()  # lists every enabled site, not only those holding sessions of ours
    samples = scrape(client)
    assert value(samples, "rewind_flr_sessions_live", site=site.name, owner="foreign") == 2
    listed_at = value(samples, "rewind_flr_sessions_listed_timestamp_seconds", site=site.name)
    assert abs(listed_at - timezone.now().timestamp()) < 60


@pytest.mark.django_db
def test_it_counts_mcp_calls_and_reaper_actions_from_the_audit_log(client: Client, token: str) -> None:
    def call(tool: str, outcome: str) -> None:
        data = {"tool": tool, "outcome": outcome}
        audit_record(actor=Actor.agent("fixer"), action=McpAction.TOOL_CALLED, target=("mcp.tool", tool), data=data)

    call("zerto_find_protection", "ok")
    call("zerto_find_protection", "ok")
    call("zerto_recover_file", "error")
    call("Not A Tool/../x", "error")
    audit_record(actor=SETUP, action=RecoveryAction.EXPIRED, target=("recovery", "1"), data={})
    audit_record(actor=SETUP, action=RecoveryAction.FAILED, target=("recovery", "2"), data={"by": "reaper"})
    audit_record(actor=SETUP, action=RecoveryAction.FAILED, target=("recovery", "3"), data={"error": "runner"})
    first = scrape(client)
    assert value(first, "rewind_mcp_calls_total", tool="zerto_find_protection", outcome="ok") == 2
    assert value(first, "rewind_mcp_calls_total", tool="zerto_recover_file", outcome="error") == 1
    assert value(first, "rewind_mcp_calls_total", tool="other", outcome="error") == 1
    assert value(first, "rewind_reaper_actions_total", action=RecoveryAction.EXPIRED) == 1
    assert value(first, "rewind_reaper_actions_total", action=RecoveryAction.FAILED) == 1  # only the reaper's
    assert value(first, "rewind_reaper_actions_total", action=RecoveryAction.SESSION_REAPED) == 0

    call("zerto_find_protection", "ok")  # the next scrape reads only what was appended since
    assert value(scrape(client), "rewind_mcp_calls_total", tool="zerto_find_protection", outcome="ok") == 3


@pytest.mark.django_db
def test_a_source_that_fails_is_reported_and_the_rest_still_served(
    client: Client, token: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken() -> Any:
        raise ConnectionError("redis is down")

    monkeypatch.setitem(collectors.SOURCES, "zvm_requests", broken)
    guard("ok", 1, 1)
    samples = scrape(client)
    assert value(samples, "rewind_metrics_source_up", source="zvm_requests") == 0
    assert value(samples, "rewind_metrics_source_up", source="guards") == 1
    assert value(samples, "rewind_guards_total", status="ok") == 1


@pytest.mark.django_db
def test_workers_their_clocks_and_the_task_queue_are_shown(client: Client, token: str) -> None:
    from rewind.workers.models import WorkerHeartbeat
    from rewind.workers.services import broker_outage_ended, broker_outage_noticed

    now = timezone.now()
    WorkerHeartbeat.objects.create(
        hostname="w1@h", pid=1, concurrency=2, started_at=now, seen_at=now, clock_offset_s=300.2
    )
    broker_outage_noticed(broker="Redis at 127.0.0.1:6399/0", error="refused", noticed_by="w1@h")
    down = scrape(client)
    assert value(down, "rewind_workers_alive") == 1
    assert value(down, "rewind_worker_clock_offset_seconds", worker="w1@h") == 300.2
    assert value(down, "rewind_task_queue_up") == 0
    assert value(down, "rewind_task_queue_outages_total") == 1
    broker_outage_ended()
    assert value(scrape(client), "rewind_task_queue_up") == 1


@pytest.mark.django_db
def test_the_newest_check_of_the_audit_chain_is_shown(client: Client, token: str) -> None:
    from rewind.audit.verification import audit_chain_verify

    audit_record(actor=SETUP, action="agent.created", target=("agent", "1"))
    assert ("rewind_audit_chain_intact", ()) not in scrape(client)  # never checked: no sample, no false "1"
    result = audit_chain_verify(actor=SETUP)
    assert result.ok
    samples = scrape(client)
    assert samples[("rewind_audit_chain_intact", ())] == 1
    assert samples[("rewind_audit_chain_broken_at", ())] == 0
    assert result.event is not None
    assert samples[("rewind_audit_chain_checked_timestamp_seconds", ())] == result.event.time.timestamp()
