"""/api/agents/: create, issue a token shown once, revoke; token hashes never leave."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User

from rewind.agents import hash_token
from rewind.models import Agent, AgentToken, AuditEvent


@pytest.fixture
def made(api: Any, superuser: Any) -> tuple[Any, dict[str, Any]]:
    client = api(superuser)
    response = client.post("/api/agents/", {"name": "fixer", "description": "edits configs"})
    assert response.status_code == 201, response.content
    return client, response.json()


def _issue(client: Any, agent_id: int, **body: Any) -> Any:
    response = client.post(f"/api/agents/{agent_id}/tokens/", body)
    assert response.status_code == 201, response.content
    return response


@pytest.mark.django_db
def test_a_person_creates_an_agent_they_own(made: tuple[Any, dict[str, Any]]) -> None:
    _, body = made
    assert body["name"] == "fixer"
    assert body["owner"] == "root"
    assert body["is_active"]
    assert body["tokens"] == []
    event = AuditEvent.objects.get(action="agent.created")
    assert (event.actor_type, event.actor, event.data["owner"]) == ("user", "root", "root")


@pytest.mark.django_db
def test_the_owner_can_be_someone_else(api: Any, superuser: Any, viewer: Any) -> None:
    body = api(superuser).post("/api/agents/", {"name": "deploy-bot", "owner": "vera"}).json()
    assert body["owner"] == "vera"
    assert Agent.objects.get(name="deploy-bot").owner == viewer


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "fields"),
    [
        ({"name": "has space"}, {"name"}),
        ({"name": "x" * 65}, {"name"}),
        ({}, {"name"}),
        ({"name": "ok", "owner": "nobody-here"}, {"owner"}),
    ],
)
def test_it_rejects_bad_agents_with_field_errors(
    api: Any, superuser: Any, body: dict[str, Any], fields: set[str]
) -> None:
    response = api(superuser).post("/api/agents/", body)
    assert response.status_code == 400
    assert set(response.json()) == fields
    assert not Agent.objects.exists()


@pytest.mark.django_db
def test_it_refuses_a_taken_name(made: tuple[Any, dict[str, Any]]) -> None:
    client, _ = made
    response = client.post("/api/agents/", {"name": "fixer"})
    assert response.status_code == 400
    assert "already exists" in response.json()["name"][0]


@pytest.mark.django_db
def test_a_token_is_shown_once_and_its_hash_never(made: tuple[Any, dict[str, Any]], api: Any, viewer: Any) -> None:
    client, agent = made
    response = _issue(client, agent["id"], label="ci")
    issued = response.json()
    token = issued["token"]
    row = AgentToken.objects.get(pk=issued["id"])
    assert token.startswith("rwd_")
    assert row.token_hash == hash_token(token)
    assert token.startswith(issued["prefix"])
    assert response["Cache-Control"] == "no-store"
    assert row.token_hash not in response.content.decode()
    assert "token_hash" not in response.content.decode()
    for later in (
        client.get("/api/agents/"),
        client.get(f"/api/agents/{agent['id']}/"),
        api(viewer).get(f"/api/agents/{agent['id']}/"),
        client.get("/api/audit/"),
    ):
        text = later.content.decode()
        assert later.status_code in (200, 403)
        assert token not in text
        assert row.token_hash not in text
        assert "token_hash" not in text
    listed = client.get(f"/api/agents/{agent['id']}/").json()["tokens"]
    assert [(t["id"], t["label"], t["active"]) for t in listed] == [(row.pk, "ci", True)]


@pytest.mark.django_db
def test_issuing_is_audited_as_the_person_without_the_token(made: tuple[Any, dict[str, Any]]) -> None:
    client, agent = made
    token = _issue(client, agent["id"]).json()["token"]
    event = AuditEvent.objects.get(action="agent.token.issued")
    assert (event.actor_type, event.actor) == ("user", "root")
    assert token not in str(event.data)
    assert AgentToken.objects.get().created_by == "root"


@pytest.mark.django_db
def test_a_token_expiry_must_be_in_the_future(made: tuple[Any, dict[str, Any]]) -> None:
    client, agent = made
    response = client.post(f"/api/agents/{agent['id']}/tokens/", {"expires_at": "2001-01-01T00:00:00Z"})
    assert response.status_code == 400
    assert set(response.json()) == {"expires_at"}
    assert client.post(f"/api/agents/{agent['id']}/tokens/", {"expires_at": "soon"}).status_code == 400
    assert not AgentToken.objects.exists()
    later = _issue(client, agent["id"], expires_at="2999-01-01T00:00:00Z").json()
    assert later["expires_at"].startswith("2999-01-01")


@pytest.mark.django_db
def test_revoking_is_audited_once(made: tuple[Any, dict[str, Any]]) -> None:
    client, agent = made
    issued = _issue(client, agent["id"]).json()
    url = f"/api/agents/{agent['id']}/tokens/{issued['id']}/revoke/"
    first = client.post(url).json()
    assert first["revoked"] is True
    assert first["token"]["active"] is False
    assert first["token"]["revoked_at"]
    assert client.post(url).json()["revoked"] is False
    [event] = AuditEvent.objects.filter(action="agent.token.revoked")
    assert event.actor == "root"
    assert AgentToken.objects.get(pk=issued["id"]).revoked_at is not None


@pytest.mark.django_db
def test_a_token_of_another_agent_is_404(made: tuple[Any, dict[str, Any]], superuser: User) -> None:
    client, agent = made
    other = client.post("/api/agents/", {"name": "other"}).json()
    issued = _issue(client, other["id"]).json()
    response = client.post(f"/api/agents/{agent['id']}/tokens/{issued['id']}/revoke/")
    assert response.status_code == 404
    assert AgentToken.objects.get(pk=issued["id"]).revoked_at is None
    assert client.post("/api/agents/999999/tokens/").status_code == 404
    assert client.get("/api/agents/999999/").status_code == 404


@pytest.mark.django_db
def test_a_viewer_may_not_issue_or_revoke(made: tuple[Any, dict[str, Any]], api: Any, viewer: Any) -> None:
    client, agent = made
    issued = _issue(client, agent["id"]).json()
    as_viewer = api(viewer)
    assert as_viewer.post(f"/api/agents/{agent['id']}/tokens/").status_code == 403
    assert as_viewer.post(f"/api/agents/{agent['id']}/tokens/{issued['id']}/revoke/").status_code == 403
    assert AgentToken.objects.count() == 1
    assert AgentToken.objects.get().revoked_at is None


@pytest.mark.django_db
def test_a_person_deactivates_an_agent(made: tuple[Any, dict[str, Any]], api: Any, viewer: Any) -> None:
    client, agent = made
    url = f"/api/agents/{agent['id']}/"
    assert api(viewer).patch(url, {"is_active": False}).status_code == 403
    assert client.patch(url, {"is_active": "maybe"}).status_code == 400
    renamed = client.patch(url, {"name": "renamed", "is_active": False})
    assert renamed.status_code == 400
    assert set(renamed.json()) == {"name"}
    assert Agent.objects.get(pk=agent["id"]).is_active is True
    response = client.patch(url, {"is_active": False})
    assert response.status_code == 200
    assert response.json()["is_active"] is False
    event = AuditEvent.objects.get(action="agent.changed")
    assert event.actor == "root"
    assert event.data["after"]["is_active"] is False


@pytest.mark.django_db
def test_the_list_takes_a_fixed_number_of_queries(
    made: tuple[Any, dict[str, Any]], django_assert_max_num_queries: Any
) -> None:
    client, _ = made
    for i in range(8):
        agent = client.post("/api/agents/", {"name": f"bot-{i}"}).json()
        _issue(client, agent["id"])
        _issue(client, agent["id"])
    with django_assert_max_num_queries(8):
        assert len(client.get("/api/agents/").json()["results"]) == 9


def test_a_token_may_be_issued_with_fewer_scopes_and_an_agent_limited(api: Any, superuser: Any) -> None:
    client = api(superuser)
    agent_id = client.post("/api/agents/", {"name": "reader"}).json()["id"]
    issued = client.post(f"/api/agents/{agent_id}/tokens/", {"scope": ["rewind:read"]}).json()
    assert issued["scope"] == "rewind:read"
    assert client.post(f"/api/agents/{agent_id}/tokens/", {"scope": ["rewind:nope"]}).status_code == 400
    changed = client.patch(f"/api/agents/{agent_id}/", {"limit_vm_names": "web*\nweb*\n db? "})
    assert changed.status_code == 200, changed.content
    assert changed.json()["limit_vm_names"] == "web*\ndb?"
