"""A host that speaks only the MCP authorization flow signs in, a person consents as one of their agents,
and the host calls tools as that agent: the official Python SDK's OAuth client and real Chromium."""

from __future__ import annotations

import shutil
from typing import Any

import pytest
from django.contrib.auth.models import User
from oauth2_provider.models import Application

from rewind.agents import agent_create
from rewind.audit import Actor
from rewind.models import AgentGrant, AuditEvent
from tests.oauth.support import CALLBACK, OAuthHost, consent

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(shutil.which("chromium") is None, reason="Chromium is not installed (apt-get install chromium)"),
]

PASSWORD = "pw-alice-12345"


def _person() -> User:
    return User.objects.create_superuser("alice", "alice@example.com", PASSWORD)


def test_a_host_with_only_the_url_signs_in_and_finds_a_vm_as_the_chosen_agent(
    mcp_server: Any, mcp_sites: Any, page: Any
) -> None:
    alice = _person()
    agent_create(actor=Actor.system("tests"), name="alice-other", owner=alice)
    chosen = agent_create(actor=Actor.system("tests"), name="alice-bot", owner=alice)
    host = OAuthHost(mcp_server.mcp_url)

    async def work(client: Any) -> Any:
        return await client.call_tool("zerto_find_protection", {"vm": "web01"})

    run = host.start(work)
    shown = consent(page, host, agent="alice-bot", credentials=("alice", PASSWORD))
    found = run.wait()

    assert shown["client"] == "Test host"
    assert shown["redirect_uri"] == CALLBACK
    assert "rewind:guard" in shown["scopes"]
    assert not found.is_error, found
    assert found.structured_content["vm_name"] == "web01"
    grant = AgentGrant.objects.get()
    assert (grant.agent, grant.user, grant.revoked_at) == (chosen, alice, None)
    assert grant.application.registration_source == Application.RegistrationSource.DCR
    called = AuditEvent.objects.get(action="mcp.tool.called")
    assert (called.actor_type, called.actor) == ("agent", "alice-bot")
    assert AuditEvent.objects.filter(action="oauth.grant.created", actor="alice").exists()
