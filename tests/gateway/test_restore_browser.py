"""A person approves a restore in place in real Chromium, is refused the write-back click before the
diff exists, reads the diff, clicks again, and the guest gets the checkpoint's bytes back, verified.

The tasks run in this process (``inline_tasks``), so the test decides when the pull happens: the
first click is made, for certain, before there is any diff."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from recoveries.models import RecoveryRequest, RestoreState
from recoveries.services import recovery_request_create
from rewind.checkpoints.models import ChangeGuard
from rewind.models import Agent
from tests.gateway.support import guest_shell_file_tools
from tests.helpers import insert_tagged_checkpoint
from tests.markers import NEEDS_CHROMIUM

pytestmark = [
    pytest.mark.timeout(300),
    NEEDS_CHROMIUM,
]
NGINX = "/etc/nginx/nginx.conf"


def _state(recovery: RecoveryRequest, *states: str) -> bool:
    recovery.refresh_from_db()
    return recovery.restore_state in states


def test_the_write_back_needs_the_diff_shown_then_a_second_click(
    live_server, inline_tasks, page, sim, sites, people, guestshell_http, settings: Any
) -> None:
    settings.REWIND_LOOKUP_CACHE_S = 0
    guest_shell_file_tools(guestshell_http)
    agent = Agent.objects.create(name="fixer", owner=people.owner)
    good = sim.read_file("web01", NGINX)
    insert_tagged_checkpoint(sim, sites, "web01", "chg-1", "fixer")
    sim.set_file("web01", NGINX, text=good.decode().replace("worker_connections 768;", "worker_connections 4096"))
    recovery = recovery_request_create(
        agent=agent, vm="web01", path=NGINX, reason="my edit broke nginx", change_id="chg-1", restore=True
    )
    review = reverse("admin:recoveries_recoveryrequest_review", args=[recovery.pk])
    page.goto(f"{live_server.url}/admin/login/?next={review}")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "pw-alice")
    page.click("input[type=submit]")
    page.wait_for_url(f"**{review}")
    assert "will be written back into the guest" in page.inner_text("#recovery-restore")

    page.click("#approve")
    assert "will then be written back into the guest" in page.inner_text("#restore-warning")
    page.click("#confirm")
    page.wait_for_url(f"**{review}")
    assert "reload this page to see the diff" in page.inner_text("#restore-diff-pending")
    page.click("#write-back")  # nothing has been pulled, so there is no diff to have seen
    page.wait_for_url(f"**{review}")
    assert "not produced yet" in page.inner_text("ul.messagelist")
    assert not ChangeGuard.objects.filter(change_id=f"restore-{recovery.pk}").exists()

    inline_tasks.wait_for(lambda: _state(recovery, RestoreState.AWAITING), timeout=120)
    assert sim.read_file("web01", NGINX) != good  # pulled and compared; nothing written yet
    page.reload()
    removed = page.inner_text("#restore-diff .rw-diff-removed >> nth=-1")
    added = page.inner_text("#restore-diff .rw-diff-added >> nth=-1")
    assert "worker_connections 4096" in removed
    assert "worker_connections 768;" in added
    assert "1 line would change" not in page.inner_text("#restore-diff")  # a line removed and one added: 2
    page.click("#write-back")
    page.wait_for_url(f"**{review}")
    assert "Write-back confirmed" in page.inner_text("ul.messagelist")

    inline_tasks.wait_for(lambda: _state(recovery, RestoreState.VERIFIED, RestoreState.NOT_WRITTEN), timeout=120)
    page.reload()
    assert page.inner_text("#restore-restored") == "verified"
    assert page.inner_text("#recovery-status") == "succeeded"
    assert sim.read_file("web01", NGINX) == good
    assert recovery.confirmed_by == "alice"
