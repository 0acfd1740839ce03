"""A person approves a recovery in real Chromium and watches it run to succeeded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.urls import reverse

from recoveries.models import RecoveryRequest
from recoveries.services import recovery_request_create
from tests.fixtures import wait_until
from tests.markers import NEEDS_CHROMIUM

pytestmark = [
    pytest.mark.timeout(300),
    NEEDS_CHROMIUM,
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

    def ended() -> bool:
        page.reload()
        return page.inner_text("#recovery-status") in ("succeeded", "failed")

    wait_until(ended, 180, what="the recovery ended, as its page says", every=0.3)
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


def _log_in(page: Any, live_server: Any, user: str, password: str, then: str) -> None:
    page.goto(f"{live_server.url}/admin/login/?next={then}")
    page.fill("#id_username", user)
    page.fill("#id_password", password)
    page.click("input[type=submit]")
    page.wait_for_url(f"**{then}")


def test_a_person_denies_in_the_browser_and_nothing_is_mounted(
    live_server, worker, page, sim, sites, people, agent, tagged
) -> None:
    tagged("web01")
    recovery = recovery_request_create(agent=agent, vm="web01", path="/etc/hostname", reason="a guess")
    review = reverse("admin:recoveries_recoveryrequest_review", args=[recovery.pk])
    _log_in(page, live_server, "alice", "pw-alice", review)

    page.click("#deny")
    assert "Deny the request" in page.inner_text("#content-main")
    page.fill("#id_note", "not this file")
    page.click("#confirm")
    page.wait_for_url(f"**{review}")
    assert "Denied" in page.inner_text("ul.messagelist")
    assert page.inner_text("#recovery-status") == "denied"
    recovery.refresh_from_db()
    assert recovery.status == RecoveryRequest.Status.DENIED
    assert recovery.decided_by == "alice"
    assert not any(s.get("VmName") == "web01" for s in sim.sessions("site-b")), "a denial mounts nothing"


def test_the_guard_list_warns_of_a_checkpoint_about_to_leave_the_journal(
    live_server, page, agent, superuser, settings
) -> None:
    from datetime import timedelta

    from django.utils import timezone

    from rewind.models import ChangeGuard, TaggedCheckpoint

    settings.REWIND_RETENTION_WARN_H = 24
    guard = ChangeGuard.objects.create(
        agent_name=agent.name,
        action="edit",
        vm_identifier="vm-web01",
        vm_name="web01",
        change_id="chg-ret",
        tag="ai:fixer | edit | vm=web01 | change=chg-ret | 2026-01-01T00:00:00Z",
        timeout_s=60,
        status=ChangeGuard.Status.OK,
    )
    TaggedCheckpoint.objects.create(
        guard=guard,
        vpg_identifier="vpg-web",
        vpg_name="vpg-web",
        status=TaggedCheckpoint.Status.LISTED,
        leaves_journal_at=timezone.now() + timedelta(hours=3),
    )
    guards = reverse("admin:rewind_changeguard_changelist")
    _log_in(page, live_server, "root", "pw-root-123", guards)
    badge = page.locator(".retention-badge.retention-warn").first
    assert "leaves the journal in" in badge.inner_text()
    page.click(f'a[href*="/changeguard/{guard.pk}/change/"]')
    assert "leaves the journal in" in page.locator(".retention-badge.retention-warn").first.inner_text()
