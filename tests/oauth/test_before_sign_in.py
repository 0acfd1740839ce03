"""The authorization endpoint judges the whole request before anyone is asked to sign in (in-process).

A request that will be refused goes straight back to the client with its RFC 6749 error, or, with
no redirect URI it may be sent to, gets a page that says what is wrong; only a request that can go
on is sent to the sign-in. The same in real Chromium: tests/oauth/test_sign_in_errors.py.
"""

from __future__ import annotations

import pytest
from django.test import Client

from rewind.models import AgentGrant
from tests.oauth.support import (
    BACK_IDS,
    BACK_TO_THE_CLIENT,
    CALLBACK,
    authorize_query,
    consent_post,
    pkce,
    query_of,
    register,
)

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(("extra", "error"), BACK_TO_THE_CLIENT, ids=BACK_IDS)
def test_a_request_that_will_be_refused_goes_back_to_the_client_before_any_sign_in(
    extra: dict[str, str], error: str
) -> None:
    browser = Client()
    client_id = register(browser)
    _verifier, challenge = pkce()
    resp = browser.get(authorize_query(client_id, challenge, **extra))
    assert resp.status_code == 302, resp.content[:1000]
    assert resp["Location"].startswith(CALLBACK)
    assert query_of(resp["Location"])["error"] == error
    assert query_of(resp["Location"])["state"] == "st-1"


@pytest.mark.parametrize(
    ("redirect_uri", "client_id", "said"),
    [
        ("https://evil.example/cb", None, "not one it registered"),
        ("http://evil.example/cb", "plain-http", "must be https, or http on a loopback address"),
        (CALLBACK, "no-such-client", "does not know the client that sent you here"),
    ],
    ids=["unregistered redirect URI", "plain http off this machine", "unknown client"],
)
def test_a_request_with_no_redirect_uri_to_use_gets_a_page_that_says_what_is_wrong(
    redirect_uri: str, client_id: str | None, said: str
) -> None:
    browser = Client()
    if client_id == "plain-http":
        client_id = register(browser, redirect_uri=redirect_uri)
    elif client_id is None:
        client_id = register(browser)
    _verifier, challenge = pkce()
    resp = browser.get(authorize_query(client_id, challenge, redirect_uri=redirect_uri))
    assert resp.status_code == 400
    assert "Location" not in resp
    page = resp.content.decode()
    assert 'id="consent-error"' in page
    assert said in page
    assert "nothing was granted" in page
    assert 'id="id_username"' not in page  # no sign-in on the way


def test_a_request_that_can_go_on_is_sent_to_the_sign_in() -> None:
    browser = Client()
    client_id = register(browser)
    _verifier, challenge = pkce()
    query = authorize_query(client_id, challenge)
    resp = browser.get(query)
    assert resp.status_code == 302
    assert resp["Location"].startswith("/admin/login/")


def test_scopes_hosts_send_out_of_habit_are_left_out_of_the_grant_and_the_page_says_so() -> None:
    from django.contrib.auth.models import User

    from rewind.agents import agent_create
    from rewind.audit import Actor

    person = User.objects.create_superuser("alice", "alice@example.com", "pw-alice-12345")
    agent = agent_create(actor=Actor.system("tests"), name="alice-bot", owner=person)
    browser = Client()
    client_id = register(browser)
    _verifier, challenge = pkce()
    query = authorize_query(client_id, challenge, scope="openid offline_access profile rewind:read")
    assert browser.get(query)["Location"].startswith("/admin/login/")  # not refused
    browser.force_login(person)
    page = browser.get(query).content.decode()
    assert 'id="consent-dropped"' in page
    for scope in ("openid", "offline_access", "profile"):
        assert f"<code>{scope}</code>" in page
    back = consent_post(browser, client_id, challenge, agent.name, scope="rewind:read", granted=["rewind:read"])
    assert "code" in query_of(back)
    assert AgentGrant.objects.get().scope == "rewind:read"
    # Only habits, no scope of ours: the request goes on, offering every scope of ours.
    page = browser.get(authorize_query(client_id, challenge, scope="openid offline_access")).content.decode()
    assert 'id="consent-form"' in page
    assert 'value="rewind:guard"' in page
