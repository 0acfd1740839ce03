"""The admin's "Connect an agent": mcpconfig in the browser. Only a POST by someone allowed to
issue tokens issues one; the configuration shown holds it once, and it works against /mcp."""

from __future__ import annotations

import hashlib
import html
import json
import re
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from rewind.agents import agent_create, agent_update
from rewind.audit import Actor
from rewind.mcp.clientconfig import CLIENTS, OAUTH_ONLY
from rewind.mcp.endpoint import mcp_public_url
from rewind.models import Agent, AgentToken, AuditEvent
from tests.helpers import run
from tests.mcp.support import TOKEN_RE, connection_of
from tests.mcpfixtures import open_mcp_client

SETUP = Actor.system("tests")


@pytest.fixture(autouse=True)
def _no_public_url(settings: Any) -> None:
    settings.REWIND_PUBLIC_URL_CONFIGURED = False  # as if REWIND_PUBLIC_URL were unset


@pytest.fixture
def root(db: None) -> User:
    return User.objects.create_superuser("root", "root@example.com", "pw-root-12345")


def _staff(name: str, *codenames: str) -> User:
    user = User.objects.create_user(name, f"{name}@example.com", f"pw-{name}-12345", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label="rewind", codename__in=codenames))
    return User.objects.get(pk=user.pk)  # drop the permission cache


@pytest.fixture
def issuer(db: None) -> User:
    return _staff("tess", "view_agent", "add_agenttoken")


@pytest.fixture
def viewer(db: None) -> User:
    return _staff("victor", "view_agent", "change_agent")  # may see and edit agents, not issue tokens


@pytest.fixture
def agent(root: User) -> Agent:
    """Not the shared fixer: root's deploy-bot, made through the service as an operator makes one."""
    return agent_create(actor=SETUP, name="deploy-bot", owner=root)


def _client(user: User, **kwargs: Any) -> Client:
    client = Client(**kwargs)
    client.force_login(user)
    return client


def _connect_url(agent: Agent) -> str:
    return reverse("admin:rewind_agent_connect", args=[agent.pk])


def _shown_config(page: str) -> str:
    match = re.search(r'<pre id="client-config"[^>]*>(.*?)</pre>', page, re.DOTALL)
    assert match is not None, page[:3000]
    return html.unescape(match.group(1))


def _connection(client: str, page: str) -> tuple[str, dict[str, str], str | None]:
    """The URL and headers the configuration shown gives, read as that client reads it, and the token shown."""
    found = TOKEN_RE.findall(page)
    token = found[0] if found else None
    url, headers = connection_of(client, _shown_config(page), token)
    return url, headers, token


def test_it_refuses_staff_without_the_permission_to_issue_tokens(viewer: User, agent: Agent) -> None:
    client = _client(viewer)
    assert client.get(_connect_url(agent)).status_code == 403
    assert client.post(_connect_url(agent), {"client": "cursor"}).status_code == 403
    assert not AgentToken.objects.exists()
    assert not AuditEvent.objects.filter(action="agent.token.issued").exists()


def test_the_issue_token_action_too_needs_the_permission(viewer: User, agent: Agent) -> None:
    changelist = reverse("admin:rewind_agent_changelist")
    browser = _client(viewer)
    assert "issue_token" not in browser.get(changelist).content.decode()
    browser.post(changelist, {"action": "issue_token", "_selected_action": [agent.pk]})
    assert not AgentToken.objects.exists()


def test_the_agent_page_links_to_it_only_for_those_who_may_issue_tokens(
    issuer: User, viewer: User, agent: Agent
) -> None:
    change = reverse("admin:rewind_agent_change", args=[agent.pk])
    assert _connect_url(agent) in _client(issuer).get(change).content.decode()
    assert _connect_url(agent) not in _client(viewer).get(change).content.decode()


def test_a_get_offers_every_client_and_issues_nothing(issuer: User, agent: Agent) -> None:
    resp = _client(issuer).get(_connect_url(agent))
    assert resp.status_code == 200
    page = resp.content.decode()
    for client in CLIENTS:
        assert f'value="{client}"' in page
    assert "csrfmiddlewaretoken" in page
    assert not AgentToken.objects.exists()
    assert not AuditEvent.objects.filter(action="agent.token.issued").exists()


@pytest.mark.parametrize("client", [c for c in CLIENTS if c not in OAUTH_ONLY])
def test_a_post_issues_one_token_and_shows_it_in_that_clients_format(client: str, issuer: User, agent: Agent) -> None:
    resp = _client(issuer).post(_connect_url(agent), {"client": client, "granted": ["rewind:read", "rewind:guard"]})
    assert resp.status_code == 200
    url, headers, token = _connection(client, resp.content.decode())
    # Without REWIND_PUBLIC_URL, the address the page was opened at.
    assert url == "http://testserver/mcp"
    assert headers == {"Authorization": f"Bearer {token}"}
    row = AgentToken.objects.get()
    assert row.token_hash == hashlib.sha256(str(token).encode()).hexdigest()
    assert row.label == f"Connect an agent: {client}"
    assert row.scope == "rewind:read rewind:guard"


@pytest.mark.parametrize("client", ["claude-ai", "chatgpt", "vscode"])
def test_the_oauth_choice_shows_the_url_only_and_issues_nothing(client: str, issuer: User, agent: Agent) -> None:
    resp = _client(issuer).post(_connect_url(agent), {"client": client, "oauth": "on"})
    assert resp.status_code == 200
    page = resp.content.decode()
    assert _connection(client, page) == ("http://testserver/mcp", {}, None)
    assert 'id="oauth-sign-in"' in page
    assert not AgentToken.objects.exists()


def test_the_token_is_shown_once_never_cached_and_audited_without_it(issuer: User, agent: Agent) -> None:
    browser = _client(issuer)
    resp = browser.post(_connect_url(agent), {"client": "json", "granted": ["rewind:read"]})
    page = resp.content.decode()
    token = str(_connection("json", page)[2])
    assert "no-store" in resp["Cache-Control"]
    assert "Where it goes" in page
    assert ".agents/skills/" in page
    row = AgentToken.objects.get()
    event = AuditEvent.objects.get(action="agent.token.issued")
    assert (event.actor, event.target_id) == ("tess", str(row.pk))
    assert event.request_id
    assert token not in json.dumps(event.data)
    for later in (
        _connect_url(agent),
        reverse("admin:rewind_agent_change", args=[agent.pk]),
        reverse("admin:rewind_agenttoken_changelist"),
    ):
        assert token not in browser.get(later).content.decode()


def test_the_expiry_is_the_one_asked_for(issuer: User, agent: Agent) -> None:
    _client(issuer).post(_connect_url(agent), {"client": "cursor", "expires_days": "7", "granted": ["rewind:read"]})
    row = AgentToken.objects.get()
    assert row.expires_at is not None
    assert 6.9 < (row.expires_at - row.created_at).total_seconds() / 86400 < 7.1


@pytest.mark.parametrize(
    ("form", "complaint"),
    [
        ({"client": "emacs"}, "emacs is not one of the available choices"),
        ({}, "This field is required"),
        ({"client": "cursor", "expires_days": "0"}, "greater than or equal to 1"),
        ({"client": "cursor"}, "Tick at least one thing the token may do."),
    ],
)
def test_a_bad_choice_is_refused_with_a_reason_and_issues_nothing(
    form: dict[str, str], complaint: str, issuer: User, agent: Agent
) -> None:
    resp = _client(issuer).post(_connect_url(agent), form)
    assert resp.status_code == 400
    assert complaint in html.unescape(resp.content.decode())
    assert not AgentToken.objects.exists()


def test_an_inactive_agent_is_refused_and_nothing_changes(issuer: User, agent: Agent) -> None:
    agent_update(actor=SETUP, agent=agent, is_active=False)
    browser = _client(issuer)
    page = browser.get(_connect_url(agent)).content.decode()
    assert 'id="agent-inactive"' in page
    assert 'id="connect-form"' not in page
    resp = browser.post(_connect_url(agent), {"client": "cursor", "granted": ["rewind:read"]})
    assert resp.status_code == 409
    assert "agent deploy-bot is inactive; activate it in the admin first" in resp.content.decode()
    assert not AgentToken.objects.exists()
    assert not AuditEvent.objects.filter(action="agent.token.issued").exists()
    agent.refresh_from_db()
    assert agent.is_active is False


def test_a_post_without_the_csrf_token_is_refused(issuer: User, agent: Agent) -> None:
    resp = _client(issuer, enforce_csrf_checks=True).post(_connect_url(agent), {"client": "cursor"})
    assert resp.status_code == 403
    assert not AgentToken.objects.exists()


def test_an_unknown_agent_is_not_found(issuer: User) -> None:
    assert _client(issuer).get(reverse("admin:rewind_agent_connect", args=[999])).status_code == 404


def test_one_rule_gives_the_url_to_the_command_and_the_page(settings: Any) -> None:
    settings.REWIND_PUBLIC_URL, settings.REWIND_PUBLIC_URL_CONFIGURED = "http://127.0.0.1:8500", False
    assert mcp_public_url(opened_at="https://rewind.example.com/") == "https://rewind.example.com/mcp"
    assert mcp_public_url() == "http://127.0.0.1:8500/mcp"  # the command, which has no page: REWIND_PORT's
    settings.REWIND_PUBLIC_URL, settings.REWIND_PUBLIC_URL_CONFIGURED = "https://mcp.example.com", True
    assert mcp_public_url(opened_at="https://rewind.example.com/") == "https://mcp.example.com/mcp"
    assert mcp_public_url() == "https://mcp.example.com/mcp"


def test_the_configuration_shown_connects_a_client_at_rewind_public_url(
    mcp_server: Any, transactional_db: None, settings: Any
) -> None:
    settings.REWIND_PUBLIC_URL, settings.REWIND_PUBLIC_URL_CONFIGURED = mcp_server.url, True
    root = User.objects.create_superuser("root", "root@example.com", "pw-root-12345")
    agent = agent_create(actor=SETUP, name="live-bot", owner=root)
    resp = _client(root).post(_connect_url(agent), {"client": "vscode", "granted": ["rewind:read", "rewind:guard"]})
    url, _headers, token = _connection("vscode", resp.content.decode())
    assert url == mcp_server.mcp_url
    assert "from REWIND_PUBLIC_URL" in resp.content.decode()

    async def tool_names() -> set[str]:
        async with open_mcp_client(url, token) as client:
            return {tool.name for tool in (await client.list_tools()).tools}

    names = run(tool_names())
    assert "zerto_guard_before_mutate" in names
    assert "zerto_recover_file" not in names  # not granted
