"""The consent page a person understands: nothing chosen for them, their own agents (found by typing
past a handful), each scope with what it lets the client do, the tokens' lifetimes, no admin sidebar."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from rewind.agents import agent_create
from rewind.audit import Actor
from rewind.mcp import scopes
from rewind.models import AgentGrant
from rewind.oauth.views import AGENTS_AS_RADIOS, SCOPE_CONSEQUENCES
from tests.oauth.support import authorize_query, consent_post, pkce, query_of, register

pytestmark = pytest.mark.django_db


@pytest.fixture
def person() -> User:
    return User.objects.create_superuser("alice", "alice@example.com", "pw-alice-12345")


@pytest.fixture
def browser(person: User) -> Client:
    client = Client()
    client.force_login(person)
    return client


def _agents(owner: User, n: int, prefix: str = "alice") -> list[str]:
    return [agent_create(actor=Actor.system("tests"), name=f"{prefix}-{i:02d}", owner=owner).name for i in range(n)]


def _page(browser: Client, **extra: str) -> str:
    client_id = register(browser)
    _verifier, challenge = pkce()
    resp = browser.get(authorize_query(client_id, challenge, **extra))
    assert resp.status_code == 200, resp.content[:500]
    return resp.content.decode()


def _checked(page: str, name: str) -> list[str]:
    return [m.group(1) for m in re.finditer(rf'<input[^>]*name="{name}"[^>]*value="([^"]*)"[^>]*checked', page)]


def test_nothing_is_chosen_for_the_person_but_the_narrowest_scope(browser: Client, person: User) -> None:
    _agents(person, 3)
    page = _page(browser, scope="rewind:catalog rewind:read rewind:guard")
    assert _checked(page, "agent") == []  # the first agent alphabetically was picked for them
    assert _checked(page, "granted") == ["rewind:read"]
    assert 'value="rewind:guard"' in page
    assert 'value="rewind:catalog"' in page
    page = _page(browser, scope="rewind:catalog rewind:guard")
    assert _checked(page, "granted") == ["rewind:guard"]  # read not asked for: the narrowest of what was


def test_each_scope_says_what_it_lets_the_client_do(browser: Client, person: User) -> None:
    assert set(SCOPE_CONSEQUENCES) == set(scopes.ALL)
    _agents(person, 1)
    page = _page(browser, scope=" ".join(scopes.ALL))
    for scope in scopes.ALL:
        assert SCOPE_CONSEQUENCES[scope].replace("'", "&#x27;") in page, scope


def test_a_handful_of_agents_are_radio_buttons_more_are_found_by_typing(browser: Client, person: User) -> None:
    other = User.objects.create_user("bob", password="pw-bob-12345")
    _agents(other, 2, prefix="bob")
    names = _agents(person, AGENTS_AS_RADIOS)
    page = _page(browser)
    assert page.count('type="radio" name="agent"') == AGENTS_AS_RADIOS
    assert "consent-agent-names" not in page

    names += _agents(person, 22 - AGENTS_AS_RADIOS, prefix="alice-more")
    page = _page(browser)
    assert 'type="radio" name="agent"' not in page
    assert 'list="consent-agent-names"' in page
    assert "One of your 22 agents" in page
    offered = re.findall(r'<option value="([^"]+)">', page.split('id="consent-agent-names"')[1].split("</datalist>")[0])
    assert offered == sorted(names)
    assert "bob-" not in page  # only the person's own

    client_id = register(browser)
    _verifier, challenge = pkce()
    back = consent_post(browser, client_id, challenge, "alice-more-07")
    assert "code" in query_of(back)
    assert AgentGrant.objects.get().agent.name == "alice-more-07"


def test_a_typed_name_that_is_not_one_of_the_persons_agents_is_refused(browser: Client, person: User) -> None:
    _agents(person, 8)
    other = User.objects.create_user("bob", password="pw-bob-12345")
    _agents(other, 1, prefix="bob")
    client_id = register(browser)
    _verifier, challenge = pkce()
    for typed in ("bob-00", "nobody"):
        resp = browser.post(
            "/oauth/authorize/",
            {"client_id": client_id, "redirect_uri": "http://127.0.0.1:33418/callback", "response_type": "code",
             "state": "st-1", "scope": "rewind:read", "code_challenge": challenge, "code_challenge_method": "S256",
             "agent": typed, "granted": ["rewind:read"], "allow": "Allow"},
        )  # fmt: skip
        assert resp.status_code == 200
        assert "That is not one of your active agents." in resp.content.decode()
    assert not AgentGrant.objects.exists()


def test_the_tokens_lifetimes_are_shown(browser: Client, person: User, settings: Any) -> None:
    _agents(person, 1)
    settings.OAUTH2_PROVIDER = {
        **settings.OAUTH2_PROVIDER,
        "ACCESS_TOKEN_EXPIRE_SECONDS": 600,
        "REFRESH_TOKEN_EXPIRE_SECONDS": 7 * 86400,
    }
    page = _page(browser)
    assert "an access token that lasts 10 minutes" in page
    assert "a new one for 7 days" in page


def test_the_page_has_no_admin_sidebar(browser: Client, person: User) -> None:
    _agents(person, 1)
    page = _page(browser)
    assert 'id="consent-form"' in page
    assert 'id="nav-sidebar"' not in page
    assert "toggle-nav-sidebar" not in page
