"""The retention forecast where people and agents read it: the guard and recovery REST views, the
MCP answers of zerto_checkpoint_status and zerto_recovery_status, and the admin's badges."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from recoveries.models import RecoveryRequest
from recoveries.presenters import CheckpointOut, recovery_agent_out
from recoveries.selectors import recovery_get_for_agent
from rewind.checkpoints.presenters import VpgCheckpointOut, guard_report
from rewind.models import Agent, ChangeGuard
from tests.helpers import guard_row

pytestmark = pytest.mark.django_db


@pytest.fixture
def guard(db: None) -> ChangeGuard:
    """A guard on two VPGs: one checkpoint leaves in 30 hours, the other in 3."""
    now = timezone.now()
    return guard_row(
        change_id="c-1",
        status="ok",
        vm_identifier="srv.vm-1",
        vpgs={
            name: {
                "status": "listed",
                "checkpoint_identifier": f"cp-{name}",
                "checkpoint_timestamp": now - timedelta(hours=1),
                "leaves_journal_at": now + timedelta(hours=hours),
                "journal_estimated_at": now,
                "journal_history_minutes": hours * 60,
            }
            for name, hours in (("vpg-web", 30), ("vpg-web-dr", 3))
        },
    )


def _recovery(agent: Agent, vpg: str, checkpoint: str) -> RecoveryRequest:
    return RecoveryRequest.objects.create(
        agent=agent, agent_name=agent.name, vm_identifier="srv.vm-1", vm_name="web01", path="/etc/hostname",
        normalized_path="/etc/hostname", os="linux", reason="x", checkpoint_identifier=checkpoint,
        checkpoint_source="change_id", vpg_identifier=f"{vpg}-guid", vpg_name=vpg, recovery_site_identifier="s",
        expires_at=timezone.now() + timedelta(hours=1),
    )  # fmt: skip


def test_the_guard_views_carry_the_estimate(api: Any, viewer: Any, guard: ChangeGuard) -> None:
    rows = {r.vpg_name: r for r in guard.vpgs.all()}
    detail = api(viewer).get(f"/api/guards/{guard.pk}/").json()
    by_vpg = {v["vpg_name"]: v for v in detail["vpgs"]}
    dr = rows["vpg-web-dr"]
    assert by_vpg["vpg-web-dr"]["leaves_journal_at"] == dr.leaves_journal_at.isoformat().replace("+00:00", "Z")  # type: ignore[union-attr]
    assert by_vpg["vpg-web-dr"]["journal_history_minutes"] == 180
    assert by_vpg["vpg-web"]["left_journal_seen_at"] is None
    assert by_vpg["vpg-web"]["retention_warned_at"] is None
    assert detail["leaves_journal_at"] == by_vpg["vpg-web-dr"]["leaves_journal_at"]  # the first to leave
    (listed,) = api(viewer).get("/api/guards/").json()["results"]
    assert listed["leaves_journal_at"] == detail["leaves_journal_at"]


def test_zerto_checkpoint_status_carries_the_estimate_with_a_description(guard: ChangeGuard) -> None:
    out = guard_report(guard)
    dr = next(v for v in out.vpgs if v.name == "vpg-web-dr")
    leaves = guard.vpgs.get(vpg_name="vpg-web-dr").leaves_journal_at
    assert dr.leaves_journal_at == leaves
    said = out.model_dump(mode="json")["vpgs"][out.vpgs.index(dr)]["leaves_journal_at"]
    assert said == leaves.isoformat().replace("+00:00", "Z")  # type: ignore[union-attr]  # as over REST
    assert dr.left_journal_seen_at is None
    schema = VpgCheckpointOut.model_json_schema()["properties"]
    assert "leaves the VPG's journal" in schema["leaves_journal_at"]["description"]
    assert "no longer be recovered" in schema["left_journal_seen_at"]["description"]


def test_a_recovery_shows_its_checkpoint_s_estimate_over_rest_and_mcp(
    api: Any, superuser: Any, guard: ChangeGuard, agent: Agent
) -> None:
    ours = _recovery(agent, "vpg-web-dr", "cp-vpg-web-dr")
    foreign = _recovery(agent, "vpg-web", "166834")  # a bare journal checkpoint: no forecast here
    leaves = guard.vpgs.get(vpg_name="vpg-web-dr").leaves_journal_at
    expected = leaves.isoformat().replace("+00:00", "Z")  # type: ignore[union-attr]  # as a guard says it
    detail = api(superuser).get(f"/api/recoveries/{ours.pk}/").json()
    assert detail["checkpoint"]["leaves_journal_at"] == expected
    assert detail["checkpoint"]["left_journal_seen_at"] is None
    listed = {r["id"]: r for r in api(superuser).get("/api/recoveries/").json()["results"]}
    assert listed[ours.pk]["checkpoint"]["leaves_journal_at"] == expected
    assert listed[foreign.pk]["checkpoint"]["leaves_journal_at"] is None
    out = recovery_agent_out(recovery_get_for_agent(recovery_id=ours.pk, agent_id=agent.pk))
    assert out.model_dump(mode="json")["checkpoint"]["leaves_journal_at"] == expected
    assert recovery_agent_out(ours).checkpoint.leaves_journal_at == leaves  # a row without the annotation asks once
    assert (
        "no file can be recovered"
        in CheckpointOut.model_json_schema()["properties"]["leaves_journal_at"]["description"]
    )


def test_the_recovery_list_stays_one_query_for_the_forecast(
    api: Any, superuser: Any, guard: ChangeGuard, agent: Agent, django_assert_max_num_queries: Any
) -> None:
    for _ in range(5):
        _recovery(agent, "vpg-web-dr", "cp-vpg-web-dr")
    client = api(superuser)
    client.get("/api/recoveries/")  # the session's first use writes it
    with django_assert_max_num_queries(6):
        assert len(client.get("/api/recoveries/").json()["results"]) == 5


def _admin(superuser: User) -> Client:
    client = Client()
    client.force_login(superuser)
    return client


def test_the_admin_shows_the_estimate_and_a_warning_badge_within_the_window(
    superuser: Any, guard: ChangeGuard, agent: Agent, settings: Any
) -> None:
    settings.REWIND_RETENTION_WARN_H = 24
    client = _admin(superuser)
    page = client.get(reverse("admin:rewind_changeguard_change", args=[guard.pk])).content.decode()
    assert page.count("retention-badge retention-warn") == 1  # vpg-web-dr, 3 h left; vpg-web has 30 h
    assert "leaves the journal in 3 h" in page
    assert "journal history 1800 min" in page
    listing = client.get(reverse("admin:rewind_changeguard_changelist")).content.decode()
    assert "leaves the journal in 3 h" in listing
    recovery = _recovery(agent, "vpg-web-dr", "cp-vpg-web-dr")
    review = client.get(reverse("admin:recoveries_recoveryrequest_review", args=[recovery.pk])).content.decode()
    assert 'id="recovery-journal"' in review
    assert "retention-badge retention-warn" in review
    recoveries = client.get(reverse("admin:recoveries_recoveryrequest_changelist") + "?status__exact=pending")
    assert "leaves the journal in 3 h" in recoveries.content.decode()


def test_the_admin_marks_a_checkpoint_that_left_and_no_badge_outside_the_window(
    superuser: Any, guard: ChangeGuard, agent: Agent, settings: Any
) -> None:
    settings.REWIND_RETENTION_WARN_H = 1
    now = timezone.now()
    guard.vpgs.filter(vpg_name="vpg-web").update(leaves_journal_at=now - timedelta(hours=2), left_journal_seen_at=now)
    client = _admin(superuser)
    page = client.get(reverse("admin:rewind_changeguard_change", args=[guard.pk])).content.decode()
    assert "retention-badge retention-gone" in page
    assert "retention-warn" not in page  # 3 h left is outside a 1 h window
    bare = _recovery(agent, "vpg-other", "1")
    review = client.get(reverse("admin:recoveries_recoveryrequest_review", args=[bare.pk])).content.decode()
    assert "not estimated" in review
