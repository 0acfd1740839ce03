"""An OAuth access token at /mcp: the agent of its grant, exactly as with a pasted token; refused when expired,
issued for another resource, revoked, or when its agent is inactive (real uvicorn)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from oauth2_provider.models import AccessToken

from rewind.agents import agent_create, agent_update
from rewind.audit import Actor
from rewind.models import AgentGrant, AuditEvent, ChangeGuard
from rewind.oauth.services import agent_grant_revoke
from tests.helpers import call_body, call_tool, post, tool_ok
from tests.oauth.support import oauth_token

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def person(transactional_db: None) -> User:
    return User.objects.create_user("alice", password="pw-alice-12345")


def test_tags_and_audit_rows_name_the_agent_as_with_a_pasted_token(
    mcp_server: Any, mcp_sites: Any, mcp_client: Any, person: User
) -> None:
    agent = agent_create(actor=Actor.system("tests"), name="alice-bot", owner=person)
    token = oauth_token(person, agent, resource=mcp_server.mcp_url)
    out = tool_ok(
        call_tool(mcp_client, token, "zerto_create_tagged_checkpoint", {"vm": "web01", "action": "edit", "wait": False})
    )
    guard = ChangeGuard.objects.get(pk=out["id"])
    assert guard.tag.startswith("ai:alice-bot | edit | vm=web01 |")
    assert (guard.agent_name, guard.agent_id) == ("alice-bot", agent.pk)
    created = AuditEvent.objects.get(action="guard.created")
    assert (created.actor_type, created.actor) == ("agent", "alice-bot")


def test_a_token_for_another_resource_is_refused(mcp_server: Any, person: User) -> None:
    agent = agent_create(actor=Actor.system("tests"), name="alice-bot", owner=person)
    for resource in ("https://other.example/mcp", mcp_server.url + "/other"):
        token = oauth_token(person, agent, resource=resource)
        resp = post(mcp_server.mcp_url, call_body(), token)
        assert resp.status_code == 401
        assert 'error="invalid_token"' in resp.headers["www-authenticate"]
        assert f"issued for another resource ({resource})" in resp.json()["error_description"]


def test_an_expired_revoked_or_inactive_token_is_refused_at_once(mcp_server: Any, mcp_sites: Any, person: User) -> None:
    agent = agent_create(actor=Actor.system("tests"), name="alice-bot", owner=person)
    expired = oauth_token(person, agent, resource=mcp_server.mcp_url, expires_in_s=-1)
    assert post(mcp_server.mcp_url, call_body(), expired).status_code == 401

    live = oauth_token(person, agent, resource=mcp_server.mcp_url)
    assert post(mcp_server.mcp_url, call_body(), live).status_code == 200
    agent_update(actor=Actor.system("tests"), agent=agent, is_active=False)
    assert post(mcp_server.mcp_url, call_body(), live).status_code == 401
    agent_update(actor=Actor.system("tests"), agent=agent, is_active=True)
    assert post(mcp_server.mcp_url, call_body(), live).status_code == 200
    grant = AgentGrant.objects.order_by("pk").last()  # the live token's
    assert grant is not None
    assert agent_grant_revoke(actor=Actor.user("root"), grant=grant)
    assert post(mcp_server.mcp_url, call_body(), live).status_code == 401
    assert not AccessToken.objects.filter(application=grant.application).exists()
    assert not agent_grant_revoke(actor=Actor.user("root"), grant=grant)  # once
