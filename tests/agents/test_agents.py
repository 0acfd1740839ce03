"""Agent identities: services, manage.py createagent and the admin. Tokens are shown once, stored hashed."""

from __future__ import annotations

import hashlib
import re
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.test import Client

from rewind.agents import agent_create, agent_token_issue, agent_token_revoke
from rewind.audit import Actor
from rewind.lib.errors import ApplicationError
from rewind.models import Agent, AgentToken, AuditEvent

ACTOR = Actor.user("alice")


@pytest.fixture
def owner(db: None) -> Any:
    return get_user_model().objects.create_superuser("alice", "alice@example.com", "pw-alice-123")


def test_it_stores_only_the_hash_of_an_issued_token(owner: Any) -> None:
    agent = agent_create(actor=ACTOR, name="deploy-bot", owner=owner)
    issued = agent_token_issue(actor=ACTOR, agent=agent)
    assert issued.token.startswith("rwd_")
    assert len(issued.token) >= 40
    row = AgentToken.objects.get()
    assert row.token_hash == hashlib.sha256(issued.token.encode()).hexdigest()
    assert issued.token not in repr(issued)
    assert row.prefix == issued.token[:10]
    events = AuditEvent.objects.filter(action__startswith="agent.").order_by("seq")
    assert [e.action for e in events] == ["agent.created", "agent.token.issued"]
    assert all(issued.token not in str(e.data) and row.token_hash not in str(e.data) for e in events)


def test_it_refuses_a_bad_or_taken_agent_name(owner: Any) -> None:
    agent_create(actor=ACTOR, name="bot", owner=owner)
    with pytest.raises(ApplicationError, match="already exists"):
        agent_create(actor=ACTOR, name="bot", owner=owner)
    with pytest.raises(ApplicationError, match="letters, digits"):
        agent_create(actor=ACTOR, name="bot | evil", owner=owner)


def test_it_revokes_once_and_audits_it(owner: Any) -> None:
    agent = agent_create(actor=ACTOR, name="bot", owner=owner)
    row = agent_token_issue(actor=ACTOR, agent=agent).row
    assert agent_token_revoke(actor=ACTOR, token=row) is True
    assert agent_token_revoke(actor=ACTOR, token=row) is False
    assert AuditEvent.objects.filter(action="agent.token.revoked").count() == 1
    assert AgentToken.objects.get().revoked_at is not None


def test_createagent_prints_the_token_alone_on_the_last_line(owner: Any) -> None:
    out, err = StringIO(), StringIO()
    call_command("createagent", "ops-bot", "--expires-days", "7", stdout=out, stderr=err)
    token = out.getvalue().strip().splitlines()[-1]
    assert token.startswith("rwd_")
    assert " " not in token
    agent = Agent.objects.get(name="ops-bot")
    assert agent.owner == owner  # the first superuser by default
    row = AgentToken.objects.get(agent=agent)
    assert row.token_hash == hashlib.sha256(token.encode()).hexdigest()
    assert row.expires_at is not None
    # A second run issues another token for the same agent.
    call_command("createagent", "ops-bot", stdout=StringIO(), stderr=StringIO())
    assert AgentToken.objects.filter(agent=agent).count() == 2


def test_createagent_takes_an_owner(owner: Any) -> None:
    bob = get_user_model().objects.create_user("bob", password="pw-bob-12345")
    call_command("createagent", "bobs-bot", "--owner", "bob", stdout=StringIO(), stderr=StringIO())
    assert Agent.objects.get(name="bobs-bot").owner == bob
    with pytest.raises(CommandError, match="no user named 'nobody'"):
        call_command("createagent", "x-bot", "--owner", "nobody", stdout=StringIO(), stderr=StringIO())


def test_createagent_explains_when_there_is_no_superuser(db: None) -> None:
    with pytest.raises(CommandError, match="no superuser"):
        call_command("createagent", "lonely-bot", stdout=StringIO(), stderr=StringIO())
    assert not Agent.objects.exists()


def _admin(owner: Any) -> Client:
    client = Client()
    client.force_login(owner)
    return client


def test_the_admin_creates_an_agent_and_shows_a_new_token_once(owner: Any) -> None:
    client = _admin(owner)
    resp = client.post(
        "/admin/rewind/agent/add/",
        {
            "name": "admin-bot",
            "owner": owner.pk,
            "is_active": "on",
            "description": "made in the admin",
            "tokens-TOTAL_FORMS": "0",
            "tokens-INITIAL_FORMS": "0",
        },
    )
    assert resp.status_code == 302, resp.content[:2000]
    agent = Agent.objects.get(name="admin-bot")
    assert AuditEvent.objects.filter(action="agent.created", target_id=str(agent.pk)).exists()
    # The action leads to the agent's "Connect an agent" page, which issues nothing until its form is sent.
    resp = client.post("/admin/rewind/agent/", {"action": "issue_token", "_selected_action": [agent.pk]})
    assert resp.status_code == 302
    assert resp["Location"] == f"/admin/rewind/agent/{agent.pk}/connect/"
    assert not AgentToken.objects.filter(agent=agent).exists()
    page = client.post(resp["Location"], {"client": "json", "granted": ["rewind:read"]}).content.decode()
    row = AgentToken.objects.get(agent=agent)
    token = re.findall(r"Bearer (rwd_[A-Za-z0-9_-]+)", page)[0]
    assert hashlib.sha256(token.encode()).hexdigest() == row.token_hash
    # Shown once: neither the token nor its hash appears on any later page.
    for url in (
        "/admin/rewind/agent/",
        f"/admin/rewind/agent/{agent.pk}/change/",
        "/admin/rewind/agenttoken/",
        f"/admin/rewind/agenttoken/{row.pk}/change/",
    ):
        later = client.get(url).content.decode()
        assert token not in later
        assert row.token_hash not in later


def test_the_admin_revokes_tokens(owner: Any) -> None:
    agent = agent_create(actor=ACTOR, name="bot", owner=owner)
    row = agent_token_issue(actor=ACTOR, agent=agent).row
    resp = _admin(owner).post(
        "/admin/rewind/agenttoken/", {"action": "revoke", "_selected_action": [row.pk]}, follow=True
    )
    assert resp.status_code == 200
    row.refresh_from_db()
    assert row.revoked_at is not None
    assert AuditEvent.objects.get(action="agent.token.revoked").actor == "alice"
