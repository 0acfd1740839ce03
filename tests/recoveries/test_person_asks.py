"""A person asks for a recovery (REST and the admin), as an agent does over MCP: the same binding,
audited in their name, and someone else must approve it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from recoveries.approver_email import approver_addresses
from recoveries.models import RecoveryApproval, RecoveryRequest
from recoveries.services import recovery_request_approve, recovery_request_create, recovery_request_deny
from recoveries.undo import moment_of_call
from rewind.agents import agent_token_issue
from rewind.audit import Actor
from rewind.gateway.models import GatewayCall
from rewind.lib.errors import ApplicationError, NotFoundError, PermissionDeniedError
from rewind.models import AuditEvent
from tests.fixtures import APPROVE, make_user

pytestmark = pytest.mark.django_db
ASK = (("recoveries", "add_recoveryrequest"),)
LIST = "/api/recoveries/"


@pytest.fixture
def asker(db: None) -> User:
    """Paula may ask for recoveries, and approve them: not her own."""
    return make_user("paula", password="pw-paula", perms=(*APPROVE, *ASK))


def _body(**fields: Any) -> dict[str, Any]:
    return {"vm": "web01", "path": "/etc/hostname", "reason": "the hostname got lost", **fields}


def _nothing_recorded(audit_rows_before: int) -> None:
    assert not RecoveryRequest.objects.exists()
    assert AuditEvent.objects.count() == audit_rows_before


# --- REST ---------------------------------------------------------------------------------------


def test_a_person_asks_over_rest_and_the_request_and_its_audit_row_name_them(sim, sites, tagged, asker, api) -> None:
    guard = tagged("web01")
    answer = api(asker).post(LIST, _body(change_id="chg-1"))
    assert answer.status_code == 201, answer.content
    body = answer.json()
    assert (body["status"], body["agent"], body["requested_by"]) == ("pending", "", "paula")
    assert body["checkpoint"]["tag"] == guard.tag
    assert body["approval_url"].endswith(f"/admin/recoveries/recoveryrequest/{body['id']}/review/")
    recovery = RecoveryRequest.objects.get(pk=body["id"])
    assert recovery.agent is None
    assert recovery.requested_by == asker
    assert recovery.requester == "person paula"
    event = AuditEvent.objects.get(action="recoveries.request.requested", target_id=str(recovery.pk))
    assert (event.actor_type, event.actor) == ("user", "paula")
    assert event.data["requested_by"] == "paula"
    assert api(asker).get(reverse("recoveries-api:detail", args=[recovery.pk])).json()["requested_by"] == "paula"


def test_a_person_asks_for_a_folder_with_recursive(sim, sites, tagged, asker, api) -> None:
    tagged("web01")
    answer = api(asker).post(LIST, _body(path="/etc/nginx", recursive=True))
    assert answer.status_code == 201, answer.content
    recovery = RecoveryRequest.objects.get(pk=answer.json()["id"])
    assert recovery.recursive
    assert recovery.normalized_path == "/etc/nginx"


def test_restore_is_refused_at_once_when_no_writer_serves_the_vm(sim, sites, tagged, asker, api) -> None:
    tagged("web01")
    before = AuditEvent.objects.count()
    answer = api(asker).post(LIST, _body(restore=True))
    assert answer.status_code == 409
    assert "no tool is configured to write a file into web01" in answer.json()["detail"]
    _nothing_recorded(before)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (_body(reason="   "), "reason"),
        ({"vm": "web01", "path": "/etc/hostname"}, "reason"),
        (_body(path="etc/hostname"), "path"),
        (_body(path="/etc/../etc/shadow"), "path"),
        (_body(recursive="true"), "recursive"),
        (_body(restore=1), "restore"),
        (_body(vm=""), "vm"),
    ],
)
def test_bad_input_is_refused_with_400_and_nothing_is_recorded(
    sim, sites, tagged, asker, api, body: dict[str, Any], field: str
) -> None:
    tagged("web01")
    before = AuditEvent.objects.count()
    answer = api(asker).post(LIST, body)
    assert answer.status_code == 400, answer.content
    assert field in answer.json()
    _nothing_recorded(before)


def test_asking_needs_staff_and_the_add_permission(sim, sites, tagged, people, api) -> None:
    tagged("web01")
    before = AuditEvent.objects.count()
    not_staff = make_user("nora", password="pw-nora", staff=False, perms=ASK)
    for user in (people.approver, people.outsider, not_staff, None):
        answer = api(user).post(LIST, _body())
        assert answer.status_code == 403, user
    assert "permission to ask" in api(people.approver).post(LIST, _body()).json()["detail"]
    _nothing_recorded(before)


def test_an_agents_bearer_token_is_not_accepted_for_asking(sim, sites, tagged, agent) -> None:
    tagged("web01")
    before = AuditEvent.objects.count()
    token = agent_token_issue(actor=Actor.system("tests"), agent=agent).token
    client = Client(enforce_csrf_checks=True)
    answer = client.post(LIST, _body(), content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert answer.status_code in (401, 403)
    assert not RecoveryRequest.objects.exists()
    assert AuditEvent.objects.filter(action="recoveries.request.requested").count() == 0
    assert AuditEvent.objects.count() == before + 1  # the token's issue, nothing else


# --- the service's rules --------------------------------------------------------------------------


def test_the_person_who_asked_may_not_approve_but_another_may(sim, sites, tagged, asker, people, api) -> None:
    tagged("web01")
    recovery = recovery_request_create(person=asker, vm="web01", path="/etc/hostname", reason="x")
    with pytest.raises(PermissionDeniedError, match="you asked for this file yourself; someone else must approve"):
        recovery_request_approve(recovery_id=recovery.pk, user=asker)
    refused = api(asker).post(reverse("recoveries-api:approve", args=[recovery.pk]))
    assert refused.status_code == 403
    assert RecoveryApproval.objects.count() == 0
    assert recovery_request_approve(recovery_id=recovery.pk, user=people.approver).status == "approved"


def test_the_person_who_asked_may_deny_their_own_request(sim, sites, tagged, asker) -> None:
    tagged("web01")
    recovery = recovery_request_create(person=asker, vm="web01", path="/etc/hostname", reason="x")
    assert recovery_request_deny(recovery_id=recovery.pk, user=asker).status == "denied"


def test_exactly_one_of_agent_and_person_asks(sim, sites, tagged, asker, agent) -> None:
    tagged("web01")
    for who in ({}, {"agent": agent, "person": asker}):
        with pytest.raises(ApplicationError, match="name exactly one"):
            recovery_request_create(vm="web01", path="/etc/hostname", reason="x", **who)
    assert not RecoveryRequest.objects.exists()


def test_a_person_is_not_held_to_an_agents_vm_limit(sim, sites, tagged, asker, agent) -> None:
    tagged("web01")
    agent.limit_vm_names = "db*"
    agent.save()
    with pytest.raises(PermissionDeniedError, match="outside agent fixer's limit"):
        recovery_request_create(agent=agent, vm="web01", path="/etc/hostname", reason="x")
    assert recovery_request_create(person=asker, vm="web01", path="/etc/hostname", reason="x").pk


def test_a_person_may_name_any_agents_gateway_call_and_an_agent_only_its_own(db) -> None:
    GatewayCall.objects.create(
        call_id="call-1",
        agent_name="fixer",
        upstream_name="guestshell",
        tool="write_file",
        exposed_name="guestshell__write_file",
        forwarded_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
    )
    assert moment_of_call("call-1", agent_name=None).call_id == "call-1"
    assert moment_of_call("call-1", agent_name="fixer").call_id == "call-1"
    with pytest.raises(NotFoundError, match="you made no call"):
        moment_of_call("call-1", agent_name="other")
    with pytest.raises(NotFoundError, match="no call 'call-2' went through the gateway"):
        moment_of_call("call-2", agent_name=None)


def test_the_approver_mail_leaves_out_the_person_who_asked(sim, sites, tagged, asker, people) -> None:
    tagged("web01")
    recovery = recovery_request_create(person=asker, vm="web01", path="/etc/hostname", reason="x")
    recovery = RecoveryRequest.objects.select_related("requested_by").get(pk=recovery.pk)
    told = approver_addresses(recovery)
    assert "paula@example.com" not in told
    assert {"alice@example.com", "bob@example.com", "olivia@example.com"} <= set(told)


# --- admin ---------------------------------------------------------------------------------------


def _admin(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


ASK_URL = "/admin/recoveries/recoveryrequest/ask/"


def test_the_admin_ask_page_asks_and_opens_the_review_page(sim, sites, tagged, asker) -> None:
    tagged("web01")
    client = _admin(asker)
    listing = client.get(reverse("admin:recoveries_recoveryrequest_changelist") + "?status__exact=pending")
    assert ASK_URL in listing.content.decode()
    page = client.get(ASK_URL)
    assert page.status_code == 200
    for field in ("vm", "path", "reason", "checkpoint", "change_id", "before_call", "point_in_time"):
        assert f'name="{field}"' in page.content.decode()
    for box in ("recursive", "restore"):
        assert f'type="checkbox" name="{box}"' in page.content.decode()

    form = {"vm": "web01", "path": "/etc/hostname", "reason": "lost it", "change_id": "chg-1", "checkpoint": ""}
    answer = client.post(ASK_URL, form)
    recovery = RecoveryRequest.objects.get()
    review = reverse("admin:recoveries_recoveryrequest_review", args=[recovery.pk])
    assert answer.status_code == 302
    assert answer["Location"] == review
    assert (recovery.requested_by_name, recovery.change_id, recovery.recursive) == ("paula", "chg-1", False)
    event = AuditEvent.objects.get(action="recoveries.request.requested")
    assert (event.actor_type, event.actor) == ("user", "paula")
    shown = client.get(review).content.decode()
    assert f"Recovery #{recovery.pk} is asked for" in shown
    assert "person paula" in shown
    assert 'id="own-request"' in shown
    assert 'id="approve"' not in shown


def test_the_admin_ask_page_shows_the_services_refusal_and_records_nothing(sim, sites, tagged, asker) -> None:
    tagged("web01")
    before = AuditEvent.objects.count()
    client = _admin(asker)
    refused = client.post(ASK_URL, {"vm": "nosuchvm", "path": "/etc/hostname", "reason": "x"})
    assert refused.status_code == 409
    assert 'id="ask-error"' in refused.content.decode()
    assert "nosuchvm" in refused.content.decode()
    invalid = client.post(ASK_URL, {"vm": "web01", "path": "/etc/hostname", "reason": ""})
    assert invalid.status_code == 400
    assert "This field is required" in invalid.content.decode()
    _nothing_recorded(before)


def test_the_admin_ask_page_needs_the_add_permission_and_the_add_view_stays_off(asker, people) -> None:
    approver = _admin(people.approver)
    assert approver.get(ASK_URL).status_code == 403
    listing = approver.get(reverse("admin:recoveries_recoveryrequest_changelist") + "?status__exact=pending")
    assert ASK_URL not in listing.content.decode()
    assert approver.post(ASK_URL, {"vm": "web01", "path": "/etc/hostname", "reason": "x"}).status_code == 403
    assert _admin(asker).get("/admin/recoveries/recoveryrequest/add/").status_code == 403
    assert not RecoveryRequest.objects.exists()
