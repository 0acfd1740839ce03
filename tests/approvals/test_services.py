"""Held calls decided by people: four eyes, who may not approve, the REST API (an agent's token is no
person), and the digest an approval binds."""

from __future__ import annotations

from typing import Any

import pytest

from rewind.approvals.models import HeldCall
from rewind.approvals.services import HoldRequest, held_call_approve, held_call_open
from rewind.lib.errors import ApplicationError, PermissionDeniedError
from rewind.models import Agent, AuditEvent
from tests.fixtures import make_user
from tests.mcpfixtures import make_agent_token

APPROVE = (("rewind", "approve_heldcall"), ("rewind", "view_heldcall"))
ARGS = {"host": "db01", "command": "DROP TABLE audit", "password": "s3cret-value"}


def hold(agent: Agent | None = None, **fields: Any) -> HeldCall:
    return held_call_open(
        HoldRequest(
            mode=HeldCall.Mode.GUARD,
            agent_id=agent.pk if agent else None,
            agent_name=agent.name if agent else "fixer",
            tool="ops/exec",
            arguments=fields.pop("arguments", ARGS),
            reason="the catalog entry ops/exec says approve",
            policy_version=3,
            vm="db01",
            **fields,
        )
    )


@pytest.fixture
def people(db: None) -> tuple[Any, Any]:
    return make_user("alice", password="pw-a", perms=APPROVE), make_user("bob", password="pw-b", perms=APPROVE)


def test_four_eyes_take_two_different_people(settings: Any, people: tuple[Any, Any]) -> None:
    settings.REWIND_APPROVAL_SECOND_APPROVER = True
    alice, bob = people
    held = hold()
    assert held.approvals_required == 2
    first = held_call_approve(held_id=held.pk, user=alice, seen_digest=held.arguments_digest)
    assert first.state == "pending"
    with pytest.raises(ApplicationError, match="already approved"):
        held_call_approve(held_id=held.pk, user=alice, seen_digest=held.arguments_digest)
    second = held_call_approve(held_id=held.pk, user=bob, seen_digest=held.arguments_digest)
    assert (second.state, second.decided_by) == ("approved", "bob")
    approvals = AuditEvent.objects.filter(action="approval.call.approved").order_by("pk")
    assert [e.data["complete"] for e in approvals] == [False, True]


def test_an_approval_binds_the_digest_the_person_was_shown(people: tuple[Any, Any]) -> None:
    alice, _bob = people
    held = hold()
    with pytest.raises(ApplicationError, match="digest"):
        held_call_approve(held_id=held.pk, user=alice, seen_digest="0" * 64)
    held.refresh_from_db()
    assert held.state == "pending"
    # The secret the agent sent is stored to be sent, never shown or audited.
    assert held.arguments_shown["password"] == "***"
    assert "s3cret-value" not in str(AuditEvent.objects.values_list("data", flat=True))


def test_arguments_that_rfc_8785_cannot_bind_are_refused_and_nothing_is_held(db: None) -> None:
    with pytest.raises(ApplicationError, match="cannot be bound"):
        hold(arguments={"count": 2**60})
    assert not HeldCall.objects.exists()


def test_a_person_without_the_permission_cannot_approve(db: None) -> None:
    held = hold()
    nobody = make_user("mallory", password="pw-m")
    with pytest.raises(PermissionDeniedError):
        held_call_approve(held_id=held.pk, user=nobody, seen_digest=held.arguments_digest)


def test_the_rest_api_lists_and_approves_for_people_and_refuses_an_agents_token(
    transactional_db: None, api: Any, client: Any
) -> None:
    agent, token = make_agent_token()
    alice = make_user("alice", password="pw-a", perms=APPROVE)
    held = hold(agent)
    url = f"/api/approvals/{held.pk}/approve/"
    # An agent's bearer token is no session: the REST API does not know it.
    refused = client.post(url, {"arguments_digest": held.arguments_digest}, HTTP_AUTHORIZATION=f"Bearer {token}")
    assert refused.status_code in (401, 403)
    agent.owner.is_staff = True  # a superuser on the staff: still the agent's owner
    agent.owner.save()
    owner = api(agent.owner).post(url, {"arguments_digest": held.arguments_digest})
    assert owner.status_code == 403
    assert "you own agent" in owner.json()["detail"]
    listed = api(alice).get("/api/approvals/", {"state": "pending"})
    assert [row["id"] for row in listed.json()["results"]] == [held.pk]
    assert listed.json()["results"][0]["arguments"]["password"] == "***"
    done = api(alice).post(url, {"arguments_digest": held.arguments_digest})
    assert done.status_code == 200
    assert done.json()["state"] == "approved"
