"""Restore in place against the simulator, through the guest shell as a real upstream: approve, pull,
diff, confirm, guard, write, read back, verify; and each way it can go wrong, reported truthfully."""

from __future__ import annotations

import hashlib
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from recoveries.models import GuestFileTools, RecoveryRequest, RestoreState
from recoveries.restore.guest_tools import guest_file_tools_set
from recoveries.restore.services import diff_token, recovery_restore_confirm, recovery_restore_decline, restore_diff
from recoveries.restore.sweep import restores_resume_stalled
from recoveries.services import recovery_request_approve, recovery_request_create
from rewind.audit import Actor
from rewind.audit.models import AuditEvent
from rewind.checkpoints.models import ChangeGuard
from rewind.lib.errors import ApplicationError
from rewind.notifications.models import NotificationDelivery, NotificationKind
from tests.fixtures import wait_until
from tests.gateway.support import add_http_upstream, guest_shell_file_tools, restore_until
from tests.helpers import call_tool, poll_recovery_status, tool_ok, tool_text
from tests.mcpfixtures import make_agent_token

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("fresh_lookups")]
NGINX = "/etc/nginx/nginx.conf"
BLOB = "/var/lib/app/blob.bin"
State = RestoreState


def _ask(agent: Any, path: str = NGINX, **kw: Any) -> RecoveryRequest:
    return recovery_request_create(
        agent=agent, vm="web01", path=path, reason="my edit broke it", change_id="chg-1", restore=True, **kw
    )


def _approve_and_compare(tasks: Any, people: Any, recovery: RecoveryRequest) -> RecoveryRequest:
    recovery_request_approve(recovery_id=recovery.pk, user=people.approver)
    return restore_until(tasks, recovery, State.AWAITING, State.NOT_WRITTEN)


def _confirm_and_finish(tasks: Any, people: Any, recovery: RecoveryRequest) -> RecoveryRequest:
    recovery_restore_confirm(recovery_id=recovery.pk, user=people.approver, seen=diff_token(recovery))
    return restore_until(tasks, recovery, State.VERIFIED, State.DIFFERS, State.NOT_WRITTEN, State.FAILED)


def _actions(recovery: RecoveryRequest) -> list[str]:
    return list(
        AuditEvent.objects.filter(target_type="recoveries.recoveryrequest", target_id=str(recovery.pk))
        .order_by("seq")
        .values_list("action", flat=True)
    )


def test_a_text_file_is_written_back_after_the_diff_and_a_second_click_and_verified(
    inline_tasks, sim, sites, people, agent, tagged, guestshell_http, receiver, settings
) -> None:
    settings.REWIND_NOTIFY_URLS = [receiver.url("/all")]
    guest_shell_file_tools(guestshell_http)
    good = sim.read_file("web01", NGINX)
    tagged("web01", "chg-1")
    sim.set_file("web01", NGINX, text="worker_connections 4096\n")
    recovery = _ask(agent)

    recovery = _approve_and_compare(inline_tasks, people, recovery)
    assert recovery.status == RecoveryRequest.Status.CONFIRM
    assert recovery.current_sha256 == hashlib.sha256(b"worker_connections 4096\n").hexdigest()
    diff = restore_diff(recovery)
    assert diff is not None
    assert diff.text
    assert any(line.kind == "removed" and "4096" in line.text for line in diff.lines)
    assert any(line.kind == "added" for line in diff.lines)
    assert sim.read_file("web01", NGINX) == b"worker_connections 4096\n"  # nothing written before the click

    recovery = _confirm_and_finish(inline_tasks, people, recovery)
    assert recovery.restore_state == State.VERIFIED, recovery.restore_message
    assert recovery.status == RecoveryRequest.Status.SUCCEEDED
    assert recovery.restore_message == "verified"
    assert sim.read_file("web01", NGINX) == good
    guard = ChangeGuard.objects.get(restores=recovery)
    assert guard.status == ChangeGuard.Status.OK
    assert guard.change_id == f"restore-{recovery.pk}"
    actions = _actions(recovery)
    for done in ("compared", "confirmed", "guarded", "finished"):
        assert f"recoveries.restore.{done}" in actions
    assert actions.index("recoveries.restore.guarded") < actions.index("recoveries.restore.finished")
    told = dict(NotificationDelivery.objects.filter(target_id=str(recovery.pk)).values_list("kind", "title"))
    assert "read the diff" in told[NotificationKind.RECOVERY_AWAITS_WRITE_BACK]
    assert told[NotificationKind.RECOVERY_RESTORED].endswith("restored: verified")
    asked = NotificationDelivery.objects.filter(kind=NotificationKind.RECOVERY_AWAITS_APPROVAL)
    assert asked.exists()
    assert all("the file will be written back into the guest" in d.body for d in asked)


def test_a_binary_file_is_restored_in_place_through_base64(
    inline_tasks, sim, sites, people, agent, tagged, guestshell_http
) -> None:
    guest_shell_file_tools(guestshell_http)
    blob = bytes(range(256)) * 8
    sim.set_file("web01", BLOB, content=blob)
    tagged("web01", "chg-1")
    sim.set_file("web01", BLOB, content=b"\x00\xff" * 10)
    recovery = _approve_and_compare(inline_tasks, people, _ask(agent, BLOB))
    diff = restore_diff(recovery)
    assert diff is not None
    assert not diff.text
    assert (diff.current_size, diff.recovered_size) == (20, len(blob))

    recovery = _confirm_and_finish(inline_tasks, people, recovery)
    assert recovery.restore_state == State.VERIFIED, recovery.restore_message
    assert sim.read_file("web01", BLOB) == blob


def test_the_write_back_is_refused_before_the_diff_and_for_another_diff(
    inline_tasks, sim, sites, people, agent, tagged, guestshell_http
) -> None:
    guest_shell_file_tools(guestshell_http)
    tagged("web01", "chg-1")
    recovery = _ask(agent)
    with pytest.raises(ApplicationError, match="not produced yet"):
        recovery_restore_confirm(recovery_id=recovery.pk, user=people.approver, seen="")
    recovery = _approve_and_compare(inline_tasks, people, recovery)
    for seen in ("", "0" * 32):
        with pytest.raises(ApplicationError, match="not been shown the diff"):
            recovery_restore_confirm(recovery_id=recovery.pk, user=people.approver, seen=seen)
    recovery.refresh_from_db()
    assert recovery.restore_state == State.AWAITING
    assert not ChangeGuard.objects.filter(change_id=f"restore-{recovery.pk}").exists()


def test_a_vm_without_a_writer_is_refused_at_once_and_the_bytes_alone_can_still_be_asked(
    sim, sites, agent, tagged
) -> None:
    tagged("web01", "chg-1")
    with pytest.raises(ApplicationError, match="no tool is configured to write a file into web01"):
        _ask(agent)
    assert not RecoveryRequest.objects.exists()
    plain = recovery_request_create(agent=agent, vm="web01", path=NGINX, reason="x", change_id="chg-1")
    assert plain.restore is False


def test_a_write_that_fails_half_way_is_reported_with_what_the_guest_holds(
    inline_tasks, sim, sites, people, agent, tagged, faulty, receiver, settings
) -> None:
    settings.REWIND_NOTIFY_URLS = [receiver.url("/all")]
    guest_shell_file_tools(faulty, writer_tool="write_half")
    tagged("web01", "chg-1")
    sim.set_file("web01", NGINX, text="broken\n")
    recovery = _confirm_and_finish(inline_tasks, people, _approve_and_compare(inline_tasks, people, _ask(agent)))
    assert recovery.restore_state == State.FAILED
    assert "No space left on device" in recovery.restore_message
    assert "neither the old file nor the checkpoint's" in recovery.restore_message
    assert recovery.restore_guard_id is not None  # the guard came first
    failed = NotificationDelivery.objects.get(kind=NotificationKind.RECOVERY_NOT_RESTORED)
    assert "No space left on device" in failed.body


def test_a_reader_that_gives_back_other_bytes_is_reported_as_differing(
    inline_tasks, sim, sites, people, agent, tagged, faulty
) -> None:
    guest_shell_file_tools(faulty, reader_tool="read_stale")
    good = sim.read_file("web01", NGINX)
    tagged("web01", "chg-1")
    sim.set_file("web01", NGINX, text="broken\n")
    recovery = _confirm_and_finish(inline_tasks, people, _approve_and_compare(inline_tasks, people, _ask(agent)))
    assert recovery.restore_state == State.DIFFERS
    assert recovery.restore_message.startswith("differs:")
    assert recovery.written_sha256 == hashlib.sha256(good + b"# stale\n").hexdigest()
    assert sim.read_file("web01", NGINX) == good  # it was written; the reader lies


def test_an_upstream_that_is_down_writes_nothing_and_takes_no_checkpoint(
    inline_tasks, sim, sites, people, agent, tagged, guestshell_http
) -> None:
    guest_shell_file_tools(guestshell_http)
    tagged("web01", "chg-1")
    sim.set_file("web01", NGINX, text="broken\n")
    recovery = _approve_and_compare(inline_tasks, people, _ask(agent))
    guestshell_http.stop()
    try:
        recovery = _confirm_and_finish(inline_tasks, people, recovery)
    finally:
        guestshell_http.start_again()
    assert recovery.restore_state == State.NOT_WRITTEN
    assert "no checkpoint taken" in recovery.restore_message
    assert recovery.restore_guard_id is None
    assert sim.read_file("web01", NGINX) == b"broken\n"


def test_a_binary_file_and_a_text_writer_end_before_anyone_is_asked(
    inline_tasks, sim, sites, people, agent, tagged, guestshell_http
) -> None:
    guest_shell_file_tools(guestshell_http, content_encoding="utf-8", encoding_arg="")
    sim.set_file("web01", BLOB, content=b"\xff\xfe\x00binary")
    tagged("web01", "chg-1")
    recovery = _approve_and_compare(inline_tasks, people, _ask(agent, BLOB))
    assert recovery.restore_state == State.NOT_WRITTEN
    assert recovery.status == RecoveryRequest.Status.SUCCEEDED
    assert "configure base64" in recovery.restore_message


def test_an_agent_asks_over_mcp_and_a_person_confirms_over_rest_after_reading_the_diff(
    sim, mcp_sites, mcp_client, worker, people, api, guestshell_http
) -> None:
    _agent, token = make_agent_token()
    good = sim.read_file("web01", NGINX)
    args = {"vm": "web01", "path": NGINX, "reason": "my edit broke nginx", "restore": True}
    refused = call_tool(mcp_client, token, "zerto_recover_file", args)
    assert refused.is_error
    assert "no tool is configured to write a file into web01" in tool_text(refused)

    guest_shell_file_tools(guestshell_http)
    guard = tool_ok(
        call_tool(mcp_client, token, "zerto_create_tagged_checkpoint", {"vm": "web01", "action": "edit nginx"})
    )
    assert guard["ok"], guard
    sim.set_file("web01", NGINX, text="broken\n")
    asked = tool_ok(call_tool(mcp_client, token, "zerto_recover_file", {**args, "change_id": guard["change_id"]}))
    assert asked["restore"]["state"] == "requested"
    person = api(people.approver)
    assert person.post(f"/api/recoveries/{asked['id']}/approve/").status_code == 200

    def diff_shown() -> Any:
        answer = person.get(f"/api/recoveries/{asked['id']}/diff/")
        return answer.json() if answer.status_code == 200 else None

    diff = wait_until(diff_shown, 120, what="the diff")
    assert "-broken" in diff["unified_diff"]
    refused_click = person.post(f"/api/recoveries/{asked['id']}/write-back/", {"diff": "0" * 32})
    assert refused_click.status_code == 409
    assert "not been shown the diff" in refused_click.json()["detail"]
    assert person.post(f"/api/recoveries/{asked['id']}/write-back/", {"diff": diff["diff"]}).status_code == 200

    done = poll_recovery_status(mcp_client, token, asked["id"])
    assert done["status"] == "succeeded", done
    assert done["restore"]["state"] == "verified", done
    assert done["restore"]["restored"] == "verified"
    assert done["result"]["restored"] == "verified"
    assert done["restore"]["change_id"] == f"restore-{asked['id']}"
    assert sim.read_file("web01", NGINX) == good


def test_an_operator_names_the_tools_in_the_admin_checked_against_the_upstreams_list(
    sim, superuser, client, guestshell_http
) -> None:
    upstream = add_http_upstream(guestshell_http, default_policy="pass")
    client.force_login(superuser)
    form = {
        "upstream": upstream.pk,
        "os": "linux",
        "vm_pattern": "web*",
        "writer_tool": "write_file",
        "reader_tool": "read_file",
        "vm_arg": "host",
        "path_arg": "path",
        "content_arg": "body",
        "content_encoding": "base64",
        "encoding_arg": "encoding",
        "enabled": "on",
    }
    refused = client.post("/admin/recoveries/guestfiletools/add/", form, follow=True)
    assert "takes no argument body" in refused.content.decode()
    assert not GuestFileTools.objects.exists()

    saved = client.post("/admin/recoveries/guestfiletools/add/", {**form, "content_arg": "content"}, follow=True)
    assert saved.status_code == 200
    row = GuestFileTools.objects.get()
    assert (row.vm_pattern, row.writer_tool, row.content_encoding) == ("web*", "write_file", "base64")
    event = AuditEvent.objects.get(action="recoveries.restore_tools.set")
    assert event.actor == superuser.get_username()
    assert event.data["after"]["writer_tool"] == "write_file"


def test_a_write_back_whose_step_message_was_lost_is_queued_again_by_the_sweep(
    inline_tasks, sim, sites, people, agent, tagged, guestshell_http
) -> None:
    guest_shell_file_tools(guestshell_http)
    good = sim.read_file("web01", NGINX)
    tagged("web01", "chg-1")
    sim.set_file("web01", NGINX, text="broken\n")
    recovery = _approve_and_compare(inline_tasks, people, _ask(agent))
    recovery_restore_confirm(recovery_id=recovery.pk, user=people.approver, seen=diff_token(recovery))
    assert inline_tasks.lose("recoveries.write_back") == 1  # the broker lost it
    assert restores_resume_stalled() == 0  # not silent long enough yet
    assert restores_resume_stalled(now=timezone.now() + timedelta(minutes=3)) == 1
    recovery = restore_until(inline_tasks, recovery, State.VERIFIED, State.DIFFERS, State.NOT_WRITTEN, State.FAILED)
    assert recovery.restore_state == State.VERIFIED, recovery.restore_message
    assert sim.read_file("web01", NGINX) == good


def test_a_windows_file_is_restored_through_the_windows_tools_only(
    inline_tasks, sim, sites, people, agent, tagged, guestshell_http
) -> None:
    upstream = guest_shell_file_tools(guestshell_http)  # Linux only so far
    path = "C:\\inetpub\\web.config"
    with pytest.raises(ApplicationError, match=r"into win01 \(windows\)"):
        recovery_request_create(agent=agent, vm="win01", path=path, reason="x", change_id="chg-1", restore=True)
    guest_file_tools_set(
        actor=Actor.user("admin"),
        upstream=upstream,
        os="windows",
        vm_pattern="win*",
        writer_tool="write_file",
        reader_tool="read_file",
        content_encoding="base64",
        encoding_arg="encoding",
    )
    good = sim.read_file("win01", path)
    tagged("win01", "chg-1")
    sim.set_file("win01", path, text="clobbered")
    recovery = recovery_request_create(agent=agent, vm="win01", path=path, reason="x", change_id="chg-1", restore=True)
    recovery = _confirm_and_finish(inline_tasks, people, _approve_and_compare(inline_tasks, people, recovery))
    assert recovery.restore_state == State.VERIFIED, recovery.restore_message
    assert sim.read_file("win01", path) == good


def test_a_person_may_decide_not_to_write_it_back_after_reading_the_diff(
    inline_tasks, sim, sites, people, agent, tagged, guestshell_http
) -> None:
    guest_shell_file_tools(guestshell_http)
    tagged("web01", "chg-1")
    sim.set_file("web01", NGINX, text="broken\n")
    recovery = _approve_and_compare(inline_tasks, people, _ask(agent))
    token = diff_token(recovery)
    recovery = recovery_restore_decline(recovery_id=recovery.pk, user=people.approver)
    assert recovery.status == RecoveryRequest.Status.SUCCEEDED
    assert recovery.restore_state == State.NOT_WRITTEN
    assert "alice decided not to write it back" in recovery.restore_message
    with pytest.raises(ApplicationError, match="is over"):
        recovery_restore_confirm(recovery_id=recovery.pk, user=people.approver, seen=token)
    assert sim.read_file("web01", NGINX) == b"broken\n"
    assert not ChangeGuard.objects.filter(change_id=f"restore-{recovery.pk}").exists()
    finished = AuditEvent.objects.get(action="recoveries.restore.finished", target_id=str(recovery.pk))
    assert finished.actor == "alice"
