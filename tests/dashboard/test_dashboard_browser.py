"""The dashboard in real Chromium, on real data made through the services and the simulator: what
waits for a person comes first, and every number opens the list of exactly what it counts."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django_celery_results.models import TaskResult

from recoveries.reaper import recoveries_reap
from recoveries.services import recovery_request_create
from rewind.models import Agent, ChangeGuard, Site
from rewind.protection import protection_cache_clear
from tests.fixtures import wait_until
from tests.helpers import guard_exec, install_starter_catalog, wait_guard_finished
from tests.markers import NEEDS_CHROMIUM
from tests.mcpfixtures import register_sites

pytestmark = [
    pytest.mark.timeout(300),
    NEEDS_CHROMIUM,
]


@pytest.fixture
def scene(sim: Any, worker: Any, settings: Any) -> dict[str, Any]:
    """A guard that landed, one that timed out, a pending recovery, and another operator's mount
    where that recovery would run; the reaper has swept and the chain was verified."""
    settings.REWIND_LOOKUP_CACHE_S = 0
    protection_cache_clear()
    install_starter_catalog()
    register_sites(sim, {"Site A": "site-a", "Site B": "site-b", "Site C": "site-c"})
    User.objects.create_superuser("root", "root@example.com", "pw-root-123")
    owner = User.objects.create_user("olivia", "olivia@example.com", "pw-olivia-123")
    agent = Agent.objects.create(name="fixer", owner=owner)
    nginx = {"command": "vi /etc/nginx/nginx.conf", "action": "edit nginx.conf"}
    asked = guard_exec(agent, "web01", change_id="chg-ok", **nginx)
    assert asked.guard is not None
    landed = wait_guard_finished(asked.guard)
    sim.add_fault("checkpoint_never_listed", site="site-a")
    asked = guard_exec(agent, "db01", change_id="chg-late", timeout_s=3, **nginx)
    assert asked.guard is not None
    late = wait_guard_finished(asked.guard)
    sim.clear_faults()
    assert (landed.status, late.status) == (ChangeGuard.Status.OK, ChangeGuard.Status.FAILED)
    pending = recovery_request_create(
        agent=agent, vm="web01", path="/etc/nginx/nginx.conf", reason="nginx fails after my edit", change_id="chg-ok"
    )
    where = Site.objects.get(identifier=pending.recovery_site_identifier)
    foreign = sim.open_foreign_session(where.base_url.rsplit("/", 1)[-1], "web01", pending.vpg_name)
    # The approvers' notice runs in the worker; wait for it so no number moves under the test.
    wait_until(
        lambda: TaskResult.objects.filter(task_name="recoveries.notify_approvers", status="SUCCESS").exists(), 60
    )
    recoveries_reap()
    call_command("audit_verify")
    return {"landed": landed, "late": late, "pending": pending, "foreign": foreign, "site": where}


def _log_in(page: Any, live_server: Any) -> None:
    page.goto(f"{live_server.url}/admin/login/?next=/admin/")
    page.fill("#id_username", "root")
    page.fill("#id_password", "pw-root-123")
    page.click("input[type=submit]")
    page.wait_for_url(f"{live_server.url}/admin/")


def _rows_behind(page: Any, href: str) -> int:
    """How many rows the page a number links to shows: an admin list's total, or the live page's
    sessions opened by someone else."""
    if "/flrsession/live/" in href:
        return page.locator("#live-sessions tbody tr", has_text="someone else").count()
    text = page.inner_text(".paginator").strip()
    found = re.search(r"(\d+)\s+\D+$", text)
    assert found, text
    return int(found.group(1))


def test_the_dashboard_shows_what_waits_first_and_each_number_opens_its_list(live_server, page, scene) -> None:
    pending, late, foreign = scene["pending"], scene["late"], scene["foreign"]
    _log_in(page, live_server)

    parts = page.locator("h2.rw-part").all_inner_texts()
    assert parts == ["Waiting for a person", "Activity and health"]
    waiting = page.inner_text("#dash-pending")
    assert "1 pending" in waiting
    assert "/etc/nginx/nginx.conf" in waiting
    assert "fixer" in waiting
    row = page.locator(f"#foreign-sessions tr[data-session='{foreign}']")
    assert "web01" in row.inner_text()
    assert f"recovery #{pending.pk}" in row.inner_text()  # it stands where that recovery would mount
    assert "1 failed" in page.inner_text("#dash-failed")
    assert "timed out: " in page.inner_text(f"#failed-guards tr[data-guard='{late.pk}']")
    assert "2 guards" in page.inner_text("#dash-guards")
    for name in ("Site A", "Site B", "Site C"):
        assert "available" in page.inner_text(f"#site-health tr[data-site='{name}']")
    assert "chain intact" in page.inner_text("#dash-audit")
    assert "Last sweep" in page.inner_text("#dash-reaper")
    # The same badge as the guards list shows.
    badge = page.locator(f"#failed-guards tr[data-guard='{late.pk}'] .rw-badge[data-status='failed']")
    assert badge.get_attribute("class") == "rw-badge rw-badge-bad"

    numbers = [
        (int(a.inner_text().split()[0]), a.get_attribute("href"))
        for a in page.locator("#content-main a.rw-count").all()
    ]
    assert len(numbers) >= 15
    for value, href in numbers:
        page.goto(f"{live_server.url}{href}")
        assert _rows_behind(page, href) == value, href

    page.goto(f"{live_server.url}/admin/")
    page.click("#dash-pending a.rw-count")
    page.wait_for_url("**/admin/recoveries/recoveryrequest/?status__exact=pending")
    assert page.locator("#result_list tbody tr").count() == 1
    page.goto(f"{live_server.url}/admin/")
    page.click(f"#pending-recoveries tr[data-recovery='{pending.pk}'] a.button")
    page.wait_for_url(f"**/admin/recoveries/recoveryrequest/{pending.pk}/review/")
    assert page.inner_text("#recovery-status") == "pending"
    page.goto(f"{live_server.url}/admin/")
    page.click("#dash-failed a.rw-count >> nth=0")
    page.wait_for_url("**/admin/rewind/changeguard/?*status__exact=failed*")
    assert page.locator("#result_list tbody tr").count() == 1
    assert "chg-late" in page.inner_text("#result_list")
    page.goto(f"{live_server.url}/admin/")
    page.click("#dash-foreign a.rw-count")
    page.wait_for_url("**/admin/recoveries/flrsession/live/")
    assert foreign in page.inner_text("#live-sessions")


def test_the_index_groups_the_lists_and_the_audit_list_fits_the_screen(live_server, page, scene) -> None:
    page.set_viewport_size({"width": 1280, "height": 900})
    _log_in(page, live_server)
    groups = page.locator("#content-related .module caption").all_inner_texts()
    assert [g.strip().lower() for g in groups] == [
        "approvals",
        "guards and checkpoints",
        "flr sessions",
        "the catalog",
        "gateway",
        "agents and sites",
        "the audit",
        "people",
    ]
    page.click("#content-related a:text-is('Audit log')")
    page.wait_for_url("**/admin/rewind/auditevent/")
    # Actor, action and target readable without scrolling sideways, beside the sidebar and the filters.
    overflow = page.evaluate(
        "() => { const r = document.querySelector('#changelist .results'); return r.scrollWidth - r.clientWidth; }"
    )
    assert overflow <= 0
    row = page.locator("#result_list tbody tr", has_text="recoveries.request.requested").first
    row.locator("td.field-target a").click()
    page.wait_for_url(f"**/admin/recoveries/recoveryrequest/{scene['pending'].pk}/change/")
