"""A folder restored in place against the simulator, through the guest shell as a real upstream: each
manifest file compared with the guest's, one second click, one guard, then per file write, read back
and verify (the unchanged skipped); and a writer that breaks on the way, reported file by file."""

from __future__ import annotations

import hashlib
import re
from typing import Any

import pytest
from django.urls import reverse

from recoveries.models import RecoveryRequest, RestoreState
from recoveries.presenters import recovery_dict
from recoveries.restore.services import (
    diff_token,
    recovery_restore_confirm,
    recovery_restore_decline,
    restore_folder_diffs,
)
from recoveries.services import recovery_request_approve, recovery_request_create
from rewind.audit.models import AuditEvent
from rewind.checkpoints.models import ChangeGuard
from rewind.models import Agent
from rewind.notifications.models import NotificationDelivery, NotificationKind
from tests.gateway.support import GuestShellHttp, guest_shell_file_tools, restore_until
from tests.helpers import insert_tagged_checkpoint

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("fresh_lookups")]
State = RestoreState
FOLDER = "/srv/app"
ORIGINAL = {
    "a.conf": "listen 80;\nroot /srv/app/www;\n",
    "b.conf": "gzip on;\n",
    "c.conf": "keepalive 65;\n",
    "d.conf": "log /var/log/app.log;\n",
}
WRITERS = ("write_file", "write_until_full")


def _tools(shell: GuestShellHttp, writer: str = "write_file") -> None:
    guest_shell_file_tools(shell, writer_tool=writer)


def _folder_at_checkpoint(sim: Any, sites: Any, files: dict[str, str]) -> dict[str, bytes]:
    for rel, text in files.items():
        sim.set_file("web01", f"{FOLDER}/{rel}", text=text)
    insert_tagged_checkpoint(sim, sites, "web01", "chg-1", "fixer")
    return {rel: text.encode() for rel, text in files.items()}


def _ask_and_compare(tasks: Any, people: Any, agent: Agent) -> RecoveryRequest:
    recovery = recovery_request_create(
        agent=agent,
        vm="web01",
        path=FOLDER,
        reason="my edits broke it",
        change_id="chg-1",
        recursive=True,
        restore=True,
    )
    recovery_request_approve(recovery_id=recovery.pk, user=people.approver)
    return restore_until(tasks, recovery, State.AWAITING, State.NOT_WRITTEN)


def _finish(tasks: Any, people: Any, recovery: RecoveryRequest) -> RecoveryRequest:
    recovery_restore_confirm(recovery_id=recovery.pk, user=people.approver, seen=diff_token(recovery))
    return restore_until(tasks, recovery, State.VERIFIED, State.DIFFERS, State.NOT_WRITTEN, State.FAILED)


def _writes(shell: GuestShellHttp) -> list[str]:
    return [call["arguments"]["path"] for call in shell.calls() if call["tool"] in WRITERS]


def _by_path(recovery: RecoveryRequest) -> dict[str, dict[str, Any]]:
    return {row["path"]: row for row in recovery.restore_files}


def test_a_folder_with_two_changed_files_one_unchanged_and_one_gone_is_restored_and_each_verified(
    inline_tasks, sim, sites, people, agent, guestshell_http, receiver, settings, api
) -> None:
    settings.REWIND_NOTIFY_URLS = [receiver.url("/all")]
    _tools(guestshell_http)
    good = _folder_at_checkpoint(sim, sites, ORIGINAL)
    sim.set_file("web01", f"{FOLDER}/a.conf", text="listen 8080;\nroot /srv/app/www;\n")
    sim.set_file("web01", f"{FOLDER}/b.conf", text="gzip off;\n")
    sim.delete_file("web01", f"{FOLDER}/d.conf")
    guestshell_http.clear()

    recovery = _ask_and_compare(inline_tasks, people, agent)
    assert recovery.restore_state == State.AWAITING, recovery.restore_message
    changes = {path: row["change"] for path, row in _by_path(recovery).items()}
    assert changes == {"a.conf": "changed", "b.conf": "changed", "c.conf": "unchanged", "d.conf": "new"}
    assert _writes(guestshell_http) == []  # nothing written before the click
    person = api(people.approver)
    shown = person.get(f"/api/recoveries/{recovery.pk}/diff/").json()
    files = {file["path"]: file for file in shown["files"]}
    assert "-listen 8080;" in files["a.conf"]["unified_diff"]
    assert "+listen 80;" in files["a.conf"]["unified_diff"]
    assert files["c.conf"]["unified_diff"] == ""
    assert person.post(f"/api/recoveries/{recovery.pk}/write-back/", {"diff": shown["diff"]}).status_code == 200

    recovery = restore_until(inline_tasks, recovery, State.VERIFIED, State.DIFFERS, State.NOT_WRITTEN, State.FAILED)
    assert recovery.restore_state == State.VERIFIED, recovery.restore_message
    assert recovery.restore_message.startswith("verified: 3 of 3 written verified, 1 unchanged")
    for rel, data in good.items():
        assert sim.read_file("web01", f"{FOLDER}/{rel}") == data, rel
    rows = _by_path(recovery)
    assert {path: row["result"] for path, row in rows.items()} == {
        "a.conf": "verified",
        "b.conf": "verified",
        "c.conf": "skipped",
        "d.conf": "verified",
    }
    assert rows["a.conf"]["read_back_sha256"] == hashlib.sha256(good["a.conf"]).hexdigest()
    assert sorted(_writes(guestshell_http)) == [f"{FOLDER}/{rel}" for rel in ("a.conf", "b.conf", "d.conf")]
    assert ChangeGuard.objects.filter(change_id=f"restore-{recovery.pk}").count() == 1  # one guard for all

    told = recovery_dict(recovery)["restore"]
    assert told["state"] == "verified"
    assert {file["path"]: file["result"] for file in told["files"]}["c.conf"] == "skipped"
    finished = AuditEvent.objects.get(action="recoveries.restore.finished", target_id=str(recovery.pk))
    assert {file["path"]: file["result"] for file in finished.data["files"]}["b.conf"] == "verified"
    restored = NotificationDelivery.objects.get(kind=NotificationKind.RECOVERY_RESTORED, target_id=str(recovery.pk))
    assert "c.conf: skipped" in restored.body


def test_a_writer_that_breaks_on_the_second_file_reports_each_file_truthfully(
    inline_tasks, sim, sites, people, agent, faulty, receiver, settings
) -> None:
    settings.REWIND_NOTIFY_URLS = [receiver.url("/all")]
    _tools(faulty, writer="write_until_full")
    files = {"a.conf": "one\n", "full-b.conf": "two\n" * 20, "g.conf": "three\n", "h.conf": "four\n"}
    _folder_at_checkpoint(sim, sites, files)
    for rel in files:
        sim.set_file("web01", f"{FOLDER}/{rel}", text="changed by the agent\n")

    recovery = _ask_and_compare(inline_tasks, people, agent)
    assert _writes(faulty) == []  # the comparison only reads
    order = [row["path"] for row in recovery.restore_files]
    broke = order.index("full-b.conf")
    assert broke == 1  # the second file breaks
    recovery = _finish(inline_tasks, people, recovery)

    assert recovery.restore_state == State.FAILED
    guard = ChangeGuard.objects.get(change_id=f"restore-{recovery.pk}")
    assert guard.status == ChangeGuard.Status.OK  # the guard came first
    rows = _by_path(recovery)
    assert rows["full-b.conf"]["result"] == "failed"
    assert "No space left on device" in rows["full-b.conf"]["message"]
    for rel in order[:broke]:
        assert rows[rel]["result"] == "verified", rows[rel]
        assert sim.read_file("web01", f"{FOLDER}/{rel}") == files[rel].encode()
    for rel in order[broke + 1 :]:
        assert rows[rel]["result"] == "not_written", rows[rel]
        assert "stopped at full-b.conf" in rows[rel]["message"]
        assert sim.read_file("web01", f"{FOLDER}/{rel}") == b"changed by the agent\n"
    assert _writes(faulty) == [f"{FOLDER}/{rel}" for rel in order[: broke + 1]]
    written = ", ".join(order[: broke + 1])
    assert f"written: {written}" in recovery.restore_message
    assert "not written: " + ", ".join(order[broke + 1 :]) in recovery.restore_message
    failed = NotificationDelivery.objects.get(kind=NotificationKind.RECOVERY_NOT_RESTORED)
    assert "No space left on device" in failed.body


def test_the_approval_page_shows_each_files_change_and_diff(
    inline_tasks, sim, sites, people, agent, guestshell_http, client
) -> None:
    _tools(guestshell_http)
    _folder_at_checkpoint(sim, sites, ORIGINAL)
    sim.set_file("web01", f"{FOLDER}/a.conf", text="listen 8080;\nroot /srv/app/www;\n")
    sim.delete_file("web01", f"{FOLDER}/d.conf")
    recovery = _ask_and_compare(inline_tasks, people, agent)
    diffs = restore_folder_diffs(recovery)
    assert diffs is not None
    assert [d.change for d in diffs if d.path == "b.conf"] == ["unchanged"]

    client.force_login(people.approver)
    page = client.get(reverse("admin:recoveries_recoveryrequest_review", args=[recovery.pk])).content.decode()
    assert 'id="restore-folder-diff"' in page
    assert 'class="restore-file restore-file-changed" data-path="a.conf"' in page
    assert 'class="restore-file restore-file-unchanged" data-path="b.conf"' in page
    assert 'class="restore-file restore-file-new" data-path="d.conf"' in page
    assert '<span class="rw-diff-removed">-listen 8080;</span>' in page
    assert '<span class="rw-diff-added">+log /var/log/app.log;</span>' in page
    assert f'value="{diff_token(recovery)}"' in page
    assert 'id="write-back"' in page

    recovery = _finish(inline_tasks, people, recovery)
    assert recovery.restore_state == State.VERIFIED, recovery.restore_message
    page = client.get(reverse("admin:recoveries_recoveryrequest_review", args=[recovery.pk])).content.decode()
    assert 'id="restore-results"' in page
    results = dict(re.findall(r'class="restore-result" data-path="([^"]+)">.*?<strong>(\w+)</strong>', page, re.S))
    assert results == {"a.conf": "verified", "b.conf": "skipped", "c.conf": "skipped", "d.conf": "verified"}


def test_a_folder_with_a_file_above_the_per_file_limit_is_not_written_at_all_and_says_which(
    inline_tasks, sim, sites, people, agent, guestshell_http, settings
) -> None:
    settings.REWIND_RESTORE_MAX_BYTES = 30
    _tools(guestshell_http)
    _folder_at_checkpoint(sim, sites, {"small.conf": "ok\n", "large.conf": "x" * 40 + "\n"})
    sim.set_file("web01", f"{FOLDER}/small.conf", text="changed\n")
    guestshell_http.clear()

    recovery = _ask_and_compare(inline_tasks, people, agent)

    assert recovery.restore_state == State.NOT_WRITTEN
    assert recovery.status == RecoveryRequest.Status.SUCCEEDED  # the folder's bytes are there
    assert "large.conf is above the in-place limit of 30 bytes per file" in recovery.restore_message
    assert "no file of the folder is written" in recovery.restore_message
    assert guestshell_http.calls() == []  # nobody asked, nothing read or written
    assert sim.read_file("web01", f"{FOLDER}/small.conf") == b"changed\n"


def test_a_folder_the_person_decides_not_to_write_back_says_so_for_each_file(
    inline_tasks, sim, sites, people, agent, guestshell_http
) -> None:
    _tools(guestshell_http)
    _folder_at_checkpoint(sim, sites, ORIGINAL)
    sim.set_file("web01", f"{FOLDER}/a.conf", text="broken\n")
    recovery = _ask_and_compare(inline_tasks, people, agent)
    recovery = recovery_restore_decline(recovery_id=recovery.pk, user=people.approver)

    assert recovery.restore_state == State.NOT_WRITTEN
    results = {row["path"]: (row["result"], row["message"]) for row in recovery.restore_files}
    assert set(results) == set(ORIGINAL)
    for result, message in results.values():
        assert result == "not_written"
        assert "alice decided not to write it back" in message
    assert sim.read_file("web01", f"{FOLDER}/a.conf") == b"broken\n"
    assert not ChangeGuard.objects.filter(change_id=f"restore-{recovery.pk}").exists()


def test_a_windows_folder_with_subfolders_is_written_back_through_windows_paths(
    inline_tasks, sim, sites, people, agent, guestshell_http
) -> None:
    guest_shell_file_tools(guestshell_http, os="windows")
    index = "C:\\inetpub\\wwwroot\\index.html"
    good = sim.read_file("win01", index)
    insert_tagged_checkpoint(sim, sites, "win01", "chg-1", "fixer")
    sim.set_file("win01", index, text="defaced")
    recovery = recovery_request_create(
        agent=agent, vm="win01", path="C:\\inetpub\\", reason="x", change_id="chg-1", recursive=True, restore=True
    )
    recovery_request_approve(recovery_id=recovery.pk, user=people.approver)
    recovery = restore_until(inline_tasks, recovery, State.AWAITING, State.NOT_WRITTEN)
    rows = _by_path(recovery)
    assert rows["wwwroot/index.html"]["guest_path"] == index
    assert rows["wwwroot/index.html"]["change"] == "changed"
    assert rows["web.config"]["change"] == "unchanged"

    recovery = _finish(inline_tasks, people, recovery)
    assert recovery.restore_state == State.VERIFIED, recovery.restore_message
    assert sim.read_file("win01", index) == good
    assert _writes(guestshell_http) == [index]
