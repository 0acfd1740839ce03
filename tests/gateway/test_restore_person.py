"""A person asks over REST for a file back in place: someone else approves, and someone else confirms the
write-back after the diff; the person who asked is refused both, and the page says why."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from recoveries.models import RecoveryRequest, RestoreState
from recoveries.restore.services import diff_token, recovery_restore_confirm
from rewind.audit.models import AuditEvent
from rewind.checkpoints.models import ChangeGuard
from rewind.lib.errors import PermissionDeniedError
from tests.fixtures import APPROVE, make_user
from tests.gateway.support import GuestShellHttp, guest_shell_file_tools, restore_until
from tests.helpers import insert_tagged_checkpoint

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("fresh_lookups")]
NGINX = "/etc/nginx/nginx.conf"
State = RestoreState


def _writer(shell: GuestShellHttp) -> None:
    guest_shell_file_tools(shell)


def test_a_person_asks_for_a_restore_over_rest_and_only_someone_else_approves_and_writes_it_back(
    inline_tasks, sim, sites, people, api, guestshell_http
) -> None:
    paula = make_user("paula", password="pw-paula", perms=(*APPROVE, ("recoveries", "add_recoveryrequest")))
    _writer(guestshell_http)
    good = sim.read_file("web01", NGINX)
    insert_tagged_checkpoint(sim, sites, "web01", "chg-1")
    sim.set_file("web01", NGINX, text="broken\n")
    body = {"vm": "web01", "path": NGINX, "reason": "nginx broke", "change_id": "chg-1", "restore": True}
    asked = api(paula).post("/api/recoveries/", body)
    assert asked.status_code == 201, asked.content
    assert asked.json()["restore"]["state"] == "requested"
    recovery = RecoveryRequest.objects.get(pk=asked.json()["id"])

    assert api(paula).post(f"/api/recoveries/{recovery.pk}/approve/").status_code == 403
    assert api(people.approver).post(f"/api/recoveries/{recovery.pk}/approve/").status_code == 200
    recovery = restore_until(inline_tasks, recovery, State.AWAITING, State.NOT_WRITTEN)
    assert recovery.restore_state == State.AWAITING, recovery.restore_message
    seen = diff_token(recovery)

    with pytest.raises(PermissionDeniedError, match="you asked for this file yourself; someone else must confirm"):
        recovery_restore_confirm(recovery_id=recovery.pk, user=paula, seen=seen)
    refused = api(paula).post(f"/api/recoveries/{recovery.pk}/write-back/", {"diff": seen})
    assert refused.status_code == 403
    client = Client()
    client.force_login(paula)
    page = client.get(reverse("admin:recoveries_recoveryrequest_review", args=[recovery.pk])).content.decode()
    assert 'id="write-back-not-yours"' in page
    assert 'id="write-back"' not in page
    recovery.refresh_from_db()
    assert recovery.restore_state == State.AWAITING
    assert sim.read_file("web01", NGINX) == b"broken\n"

    assert api(people.approver).post(f"/api/recoveries/{recovery.pk}/write-back/", {"diff": seen}).status_code == 200
    recovery = restore_until(inline_tasks, recovery, State.VERIFIED, State.DIFFERS, State.NOT_WRITTEN, State.FAILED)
    assert recovery.restore_state == State.VERIFIED, recovery.restore_message
    assert sim.read_file("web01", NGINX) == good
    guard = ChangeGuard.objects.get(restores=recovery)
    assert guard.agent_name == "paula"  # the write-back's guard is taken in the asker's name
    confirmed = AuditEvent.objects.get(action="recoveries.restore.confirmed", target_id=str(recovery.pk))
    assert confirmed.actor == "alice"
