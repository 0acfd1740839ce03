"""A person approves a recovery in real Chromium and watches it run to succeeded."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from django.urls import reverse

from recoveries.models import RecoveryRequest
from recoveries.services import recovery_request_create

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(shutil.which("chromium") is None, reason="Chromium is not installed (apt-get install chromium)"),
]


def test_a_person_approves_in_the_browser_and_the_recovery_succeeds(
    live_server, worker, page, sim, sites, people, agent, tagged
) -> None:
    tagged("web01")
    sim.set_file("web01", "/etc/hostname", text="wrong\n")
    recovery = recovery_request_create(agent=agent, vm="web01", path="/etc/hostname", reason="the agent clobbered it")
    review = reverse("admin:recoveries_recoveryrequest_review", args=[recovery.pk])

    page.goto(f"{live_server.url}/admin/login/?next={review}")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "pw-alice")
    page.click("input[type=submit]")
    page.wait_for_url(f"**{review}")
    facts = page.inner_text("#recovery-facts")
    for expected in (
        "web01",
        "/etc/hostname",
        recovery.vpg_name,
        "Site B",
        recovery.checkpoint_tag,
        "fixer",
        "the agent clobbered it",
    ):
        assert expected in facts

    page.click("#approve")
    assert "Approve mounting checkpoint" in page.inner_text("#content-main")
    recovery.refresh_from_db()
    assert recovery.status == RecoveryRequest.Status.PENDING
    page.click("#confirm")
    page.wait_for_url(f"**{review}")
    assert "Approved" in page.inner_text("ul.messagelist")

    for _ in range(600):
        page.reload()
        if page.inner_text("#recovery-status") in ("succeeded", "failed"):
            break
        page.wait_for_timeout(300)
    assert page.inner_text("#recovery-status") == "succeeded"
    assert "unmount: done" in page.inner_text("#recovery-result")
    recovery.refresh_from_db()
    assert recovery.decided_by == "alice"
    assert Path(recovery.stored_path).read_text() == "web01\n"


def test_a_person_ends_another_operators_session_behind_a_confirmation(
    live_server, page, sim, sites, people, settings: Any
) -> None:
    from django.contrib.auth.models import Permission

    from rewind.models import AuditEvent

    people.approver.user_permissions.add(Permission.objects.get(codename="end_flr_session"))
    foreign = sim.open_foreign_session("site-b", "db01", "vpg-db")
    page.goto(f"{live_server.url}/admin/login/?next={reverse('admin:recoveries_flrsession_live')}")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "pw-alice")
    page.click("input[type=submit]")
    row = page.locator("#live-sessions tr", has_text=foreign)
    assert "someone else" in row.inner_text()
    row.locator("a", has_text="End session").click()
    assert "did not open this session" in page.inner_text("#content-main")
    assert any(s["session_id"] == foreign for s in sim.sessions("site-b"))
    page.click("#confirm")
    assert "unmount sent" in page.inner_text("ul.messagelist")
    assert all(s["session_id"] != foreign or s["status"] == "UnmountInProgress" for s in sim.sessions("site-b"))
    event = AuditEvent.objects.get(action="recoveries.session.ended_by_hand")
    assert event.actor == "alice"
    assert event.data["session_id"] == foreign
