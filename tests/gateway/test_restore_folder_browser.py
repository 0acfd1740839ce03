"""A person approves a folder restored in place in real Chromium: the review page lists each file
(unchanged, changed, new, with the diff of a changed one), the write-back click is refused before the
comparison exists, and after the click the page lists each file's verification.

The tasks run in this process (``inline_tasks``), so the test decides when the pull happens: the
first click is made, for certain, before there is any comparison."""

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
FOLDER = "/srv/app"
GOOD = {"a.conf": "listen 80;\nroot /srv/app/www;\n", "b.conf": "gzip on;\n", "c.conf": "keepalive 65;\n"}


def _state(recovery: RecoveryRequest, *states: str) -> bool:
    recovery.refresh_from_db()
    return recovery.restore_state in states


def test_a_folder_is_written_back_after_its_files_are_shown_and_each_is_verified(
    live_server, inline_tasks, page, sim, sites, people, guestshell_http, settings: Any
) -> None:
    settings.REWIND_LOOKUP_CACHE_S = 0
    guest_shell_file_tools(guestshell_http)
    agent = Agent.objects.create(name="fixer", owner=people.owner)
    for rel, text in GOOD.items():
        sim.set_file("web01", f"{FOLDER}/{rel}", text=text)
    insert_tagged_checkpoint(sim, sites, "web01", "chg-1", "fixer")
    sim.set_file("web01", f"{FOLDER}/a.conf", text="listen 8080;\nroot /srv/app/www;\n")  # changed
    sim.delete_file("web01", f"{FOLDER}/c.conf")  # new: the guest has it no more
    recovery = recovery_request_create(
        agent=agent,
        vm="web01",
        path=FOLDER,
        reason="my edits broke it",
        change_id="chg-1",
        recursive=True,
        restore=True,
    )
    review = reverse("admin:recoveries_recoveryrequest_review", args=[recovery.pk])
    page.goto(f"{live_server.url}/admin/login/?next={review}")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "pw-alice")
    page.click("input[type=submit]")
    page.wait_for_url(f"**{review}")
    assert "changed and new files will be written back into the guest" in page.inner_text("#recovery-restore")

    page.click("#approve")
    page.click("#confirm")
    page.wait_for_url(f"**{review}")
    assert "reload this page to see the diff" in page.inner_text("#restore-diff-pending")
    page.click("#write-back")  # nothing has been pulled, so there is no comparison to have seen
    page.wait_for_url(f"**{review}")
    assert "not produced yet" in page.inner_text("ul.messagelist")
    assert not ChangeGuard.objects.filter(change_id=f"restore-{recovery.pk}").exists()

    inline_tasks.wait_for(lambda: _state(recovery, RestoreState.AWAITING), timeout=120)
    page.reload()
    changes = {
        row.get_attribute("data-path"): row.locator("td strong").first.inner_text()
        for row in page.locator("#restore-files tr.restore-file").all()
    }
    assert changes == {"a.conf": "changed", "b.conf": "unchanged", "c.conf": "new"}
    assert "No such file" in page.inner_text("#restore-files tr[data-path='c.conf']")
    diffs = page.inner_text("#restore-folder-diff")
    assert "a.conf (changed)" in diffs
    assert "b.conf (unchanged)" not in diffs  # an unchanged file has no diff
    removed = page.locator("#restore-folder-diff .rw-diff-removed").all_inner_texts()
    added = page.locator("#restore-folder-diff .rw-diff-added").all_inner_texts()
    assert any("listen 8080;" in line for line in removed)
    assert any("listen 80;" in line for line in added)
    assert sim.read_file("web01", f"{FOLDER}/a.conf") != GOOD["a.conf"].encode()  # nothing written yet
    page.click("#write-back")
    page.wait_for_url(f"**{review}")
    assert "Write-back confirmed" in page.inner_text("ul.messagelist")

    inline_tasks.wait_for(lambda: _state(recovery, RestoreState.VERIFIED, RestoreState.FAILED), timeout=120)
    page.reload()
    assert page.inner_text("#restore-restored") == "verified: 2 of 2 written verified, 1 unchanged and not written"
    results = {
        row.get_attribute("data-path"): row.locator("td strong").first.inner_text()
        for row in page.locator("#restore-results tr.restore-result").all()
    }
    assert results == {"a.conf": "verified", "b.conf": "skipped", "c.conf": "verified"}
    assert page.inner_text("#recovery-status") == "succeeded"
    for rel, text in GOOD.items():
        assert sim.read_file("web01", f"{FOLDER}/{rel}") == text.encode()
