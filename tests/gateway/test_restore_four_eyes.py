"""Four eyes on the write-back: with a second approver required, two distinct people (neither the agent's
owner nor the person who asked) must confirm the same diff before anything is written; with one, one click."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from recoveries.models import RecoveryRequest, RestoreState
from recoveries.restore.services import diff_token, recovery_restore_confirm
from recoveries.services import recovery_request_approve, recovery_request_create
from rewind.audit.models import AuditEvent
from rewind.lib.errors import ApplicationError, PermissionDeniedError
from rewind.models import Agent
from tests.fixtures import APPROVE, make_user
from tests.gateway.support import GuestShellHttp, guest_shell_file_tools, restore_until
from tests.helpers import insert_tagged_checkpoint

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("fresh_lookups")]
NGINX = "/etc/nginx/nginx.conf"
State = RestoreState
WRITE_BACK = "recoveries.write_back"
FINAL = (State.VERIFIED, State.DIFFERS, State.NOT_WRITTEN, State.FAILED)


@pytest.fixture
def broken_nginx(sim: Any, sites: Any, guestshell_http: GuestShellHttp) -> bytes:
    """A writer and reader for linux VMs, a guarded change "chg-1" of web01, then nginx.conf broken; the good bytes."""
    guest_shell_file_tools(guestshell_http)
    good = sim.read_file("web01", NGINX)
    insert_tagged_checkpoint(sim, sites, "web01", "chg-1")
    sim.set_file("web01", NGINX, text="broken\n")
    return good


def _awaiting(tasks: Any, recovery: RecoveryRequest, *approvers: Any) -> RecoveryRequest:
    for person in approvers:
        recovery_request_approve(recovery_id=recovery.pk, user=person)
    recovery = restore_until(tasks, recovery, State.AWAITING, *FINAL)
    assert recovery.restore_state == State.AWAITING, recovery.restore_message
    return recovery


def _confirmed_rows(recovery: RecoveryRequest) -> list[dict[str, Any]]:
    rows = AuditEvent.objects.filter(action="recoveries.restore.confirmed", target_id=str(recovery.pk)).order_by("seq")
    return [{"actor": e.actor, **{k: e.data[k] for k in ("confirmations", "required", "complete")}} for e in rows]


def test_with_one_approver_one_click_starts_the_write_back(inline_tasks, sim, people, broken_nginx, api) -> None:
    agent = Agent.objects.create(name="fixer", owner=people.owner)
    recovery = recovery_request_create(agent=agent, vm="web01", path=NGINX, reason="x", change_id="chg-1", restore=True)
    recovery = _awaiting(inline_tasks, recovery, people.approver)
    answer = api(people.approver).post(f"/api/recoveries/{recovery.pk}/write-back/", {"diff": diff_token(recovery)})
    assert answer.status_code == 200
    restore = answer.json()["restore"]
    assert (restore["confirmations_required"], [c["person"] for c in restore["confirmations"]]) == (1, ["alice"])
    assert answer.json()["status"] == "restoring"
    assert inline_tasks.pending().count(WRITE_BACK) == 1
    recovery = restore_until(inline_tasks, recovery, *FINAL)
    assert recovery.restore_state == State.VERIFIED, recovery.restore_message
    assert sim.read_file("web01", NGINX) == broken_nginx
    assert _confirmed_rows(recovery) == [{"actor": "alice", "confirmations": 1, "required": 1, "complete": True}]


def test_with_a_second_approver_two_distinct_people_confirm_and_the_second_click_writes_once(
    inline_tasks, sim, people, broken_nginx, api, settings
) -> None:
    settings.REWIND_RECOVERY_SECOND_APPROVER = True
    agent = Agent.objects.create(name="fixer", owner=people.owner)
    recovery = recovery_request_create(agent=agent, vm="web01", path=NGINX, reason="x", change_id="chg-1", restore=True)
    recovery = _awaiting(inline_tasks, recovery, people.approver, people.second)
    seen = diff_token(recovery)

    with pytest.raises(PermissionDeniedError, match=r"you own agent fixer.*someone else must confirm"):
        recovery_restore_confirm(recovery_id=recovery.pk, user=people.owner, seen=seen)
    first = api(people.approver).post(f"/api/recoveries/{recovery.pk}/write-back/", {"diff": seen})
    assert first.status_code == 200
    body = first.json()
    assert (body["status"], body["restore"]["state"]) == ("confirm", "awaiting")
    assert body["restore"]["confirmations_required"] == 2
    assert [c["person"] for c in body["restore"]["confirmations"]] == ["alice"]
    assert WRITE_BACK not in inline_tasks.pending()
    again = api(people.approver).post(f"/api/recoveries/{recovery.pk}/write-back/", {"diff": seen})
    assert again.status_code == 409
    assert "you already confirmed the write-back" in again.json()["detail"]
    assert sim.read_file("web01", NGINX) == b"broken\n"  # nothing written after one click

    alice = Client()
    alice.force_login(people.approver)
    review = reverse("admin:recoveries_recoveryrequest_review", args=[recovery.pk])
    page = alice.get(review).content.decode()
    assert 'id="write-back-confirmed-by-you"' in page
    assert 'id="write-back"' not in page
    bob = Client()
    bob.force_login(people.second)
    page = bob.get(review).content.decode()
    assert 'id="write-back"' in page
    assert "alice (" in page
    assert "2 needed, each a different person" in page

    clicked = bob.post(
        reverse("admin:recoveries_recoveryrequest_decide", args=[recovery.pk, "write-back"]), {"diff": seen}
    )
    assert clicked.status_code == 302
    recovery.refresh_from_db()
    assert recovery.status == RecoveryRequest.Status.RESTORING
    assert recovery.confirmed_by == "alice, bob"
    assert inline_tasks.pending().count(WRITE_BACK) == 1
    with pytest.raises(ApplicationError):
        recovery_restore_confirm(recovery_id=recovery.pk, user=people.second, seen=seen)
    assert inline_tasks.pending().count(WRITE_BACK) == 1

    recovery = restore_until(inline_tasks, recovery, *FINAL)
    assert recovery.restore_state == State.VERIFIED, recovery.restore_message
    assert sim.read_file("web01", NGINX) == broken_nginx
    assert AuditEvent.objects.filter(action="recoveries.restore.guarded", target_id=str(recovery.pk)).count() == 1
    assert _confirmed_rows(recovery) == [
        {"actor": "alice", "confirmations": 1, "required": 2, "complete": False},
        {"actor": "bob", "confirmations": 2, "required": 2, "complete": True},
    ]


def test_with_a_second_approver_the_person_who_asked_may_not_be_either_confirmation(
    inline_tasks, sim, people, broken_nginx, settings
) -> None:
    settings.REWIND_RECOVERY_SECOND_APPROVER = True
    paula = make_user("paula", password="pw-paula", perms=(*APPROVE, ("recoveries", "add_recoveryrequest")))
    recovery = recovery_request_create(
        person=paula, vm="web01", path=NGINX, reason="x", change_id="chg-1", restore=True
    )
    recovery = _awaiting(inline_tasks, recovery, people.approver, people.owner)
    seen = diff_token(recovery)
    recovery_restore_confirm(recovery_id=recovery.pk, user=people.approver, seen=seen)
    with pytest.raises(PermissionDeniedError, match="you asked for this file yourself"):
        recovery_restore_confirm(recovery_id=recovery.pk, user=paula, seen=seen)
    recovery.refresh_from_db()
    assert recovery.restore_state == State.AWAITING
    assert list(recovery.write_back_confirmations.values_list("person_name", flat=True)) == ["alice"]
    # The agent's owner rule concerns an agent's request: here olivia is just another person.
    recovery = recovery_restore_confirm(recovery_id=recovery.pk, user=people.owner, seen=seen)
    assert recovery.status == RecoveryRequest.Status.RESTORING
    assert inline_tasks.pending().count(WRITE_BACK) == 1
