"""The authorization server refuses what the RFCs say it must, with the error they name (in-process)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from rewind.agents import agent_create
from rewind.audit import Actor
from rewind.models import Agent, AgentGrant
from tests.oauth.support import (
    CALLBACK,
    authorize_query,
    consent_post,
    exchange,
    pkce,
    query_of,
    register,
)


@pytest.fixture
def person(db: None) -> User:
    return User.objects.create_superuser("alice", "alice@example.com", "pw-alice-12345")


@pytest.fixture
def agent(person: User) -> Agent:
    """Not the shared fixer: an agent of the person who signs in, for consent offers only one's own."""
    return agent_create(actor=Actor.system("tests"), name="alice-bot", owner=person)


@pytest.fixture
def signed_in(person: User) -> Client:
    client = Client()
    client.force_login(person)
    return client


def _code(signed_in: Client, client_id: str, challenge: str, agent: Agent) -> str:
    back = consent_post(signed_in, client_id, challenge, agent.name)
    assert back.startswith(CALLBACK)
    query = query_of(back)
    assert query["state"] == "st-1"
    assert query["iss"] == "http://testserver"  # RFC 9207
    return query["code"]


def test_the_consent_page_shows_the_client_its_redirect_uri_and_the_scopes_asked_for(
    signed_in: Client, agent: Agent
) -> None:
    client_id = register(signed_in)
    _verifier, challenge = pkce()
    page = signed_in.get(authorize_query(client_id, challenge)).content.decode()
    assert "Hand-made host" in page
    assert CALLBACK in page
    assert "rewind:read" in page
    assert "rewind:guard" in page
    assert "rewind:recover" not in page  # not asked for
    assert "alice-bot" in page
    assert "<script" not in page.split('id="consent-form"')[1]  # works under a CSP without inline script


def test_code_pkce_and_token_a_full_exchange_binds_the_token_to_mcp(signed_in: Client, agent: Agent) -> None:
    client_id = register(signed_in)
    verifier, challenge = pkce()
    code = _code(signed_in, client_id, challenge, agent)
    resp = exchange(signed_in, client_id, code, verifier, resource="http://testserver/mcp")
    assert resp.status_code == 200, resp.content
    body = resp.json()
    assert body["token_type"] == "Bearer"
    assert body["scope"] == "rewind:read rewind:guard"
    assert body["refresh_token"]
    grant = AgentGrant.objects.get()
    assert (grant.agent, grant.scope) == (agent, "rewind:read rewind:guard")
    from oauth2_provider.models import AccessToken

    token = AccessToken.objects.exclude(scope="oauth2_provider:registration").get()
    assert token.resource == ["http://testserver/mcp"]
    assert token.token == ""  # stored as its SHA-256 only


def test_a_reused_code_is_invalid_grant(signed_in: Client, agent: Agent) -> None:
    client_id = register(signed_in)
    verifier, challenge = pkce()
    code = _code(signed_in, client_id, challenge, agent)
    assert exchange(signed_in, client_id, code, verifier).status_code == 200
    again = exchange(signed_in, client_id, code, verifier)
    assert (again.status_code, again.json()["error"]) == (400, "invalid_grant")


@pytest.mark.parametrize(
    ("verifier", "error"),
    [(None, "invalid_request"), ("x" * 50, "invalid_grant")],
    ids=["missing verifier", "wrong verifier"],
)
def test_a_missing_or_wrong_pkce_verifier_is_refused(
    verifier: str | None, error: str, signed_in: Client, agent: Agent
) -> None:
    client_id = register(signed_in)
    _right, challenge = pkce()
    code = _code(signed_in, client_id, challenge, agent)
    resp = exchange(signed_in, client_id, code, verifier)
    assert (resp.status_code, resp.json()["error"]) == (400, error)


def test_a_wrong_pkce_verifier_uses_the_code_up(signed_in: Client, agent: Agent) -> None:
    """Whoever holds a stolen code gets one try at its verifier, not as many as they like."""
    client_id = register(signed_in)
    right, challenge = pkce()
    code = _code(signed_in, client_id, challenge, agent)
    wrong = exchange(signed_in, client_id, code, "x" * 50)
    assert (wrong.status_code, wrong.json()["error"]) == (400, "invalid_grant")
    after = exchange(signed_in, client_id, code, right)
    assert (after.status_code, after.json()["error"]) == (400, "invalid_grant")
    # A code redeemed with its own verifier first is as it was.
    code = _code(signed_in, client_id, challenge, agent)
    assert exchange(signed_in, client_id, code, right).status_code == 200


def test_a_token_request_with_another_redirect_uri_is_invalid_grant(signed_in: Client, agent: Agent) -> None:
    client_id = register(signed_in)
    verifier, challenge = pkce()
    code = _code(signed_in, client_id, challenge, agent)
    resp = exchange(signed_in, client_id, code, verifier, redirect_uri="http://127.0.0.1:33418/elsewhere")
    assert resp.status_code == 400
    assert resp.json()["error"] in ("invalid_grant", "invalid_request")


def test_an_unregistered_redirect_uri_is_never_redirected_to(signed_in: Client, agent: Agent) -> None:
    client_id = register(signed_in)
    _verifier, challenge = pkce()
    resp = signed_in.get(authorize_query(client_id, challenge, redirect_uri="https://evil.example/cb"))
    assert resp.status_code == 400
    assert "invalid_request" in resp.content.decode()
    assert "Location" not in resp


def test_a_plain_http_redirect_uri_off_this_machine_is_never_redirected_to(signed_in: Client, agent: Agent) -> None:
    client_id = register(signed_in, redirect_uri="http://evil.example/cb")
    _verifier, challenge = pkce()
    resp = signed_in.get(authorize_query(client_id, challenge, redirect_uri="http://evil.example/cb"))
    assert resp.status_code == 400
    assert "invalid_request" in resp.content.decode()
    assert "Location" not in resp


def test_a_native_client_may_come_back_to_any_loopback_port(signed_in: Client, agent: Agent) -> None:
    client_id = register(signed_in, redirect_uri="http://127.0.0.1/callback")
    _verifier, challenge = pkce()
    page = signed_in.get(authorize_query(client_id, challenge, redirect_uri="http://127.0.0.1:51234/callback"))
    assert page.status_code == 200
    assert 'id="consent-form"' in page.content.decode()


@pytest.mark.parametrize(
    ("extra", "error"),
    [
        ({"code_challenge": "", "code_challenge_method": ""}, "invalid_request"),  # PKCE is required
        ({"code_challenge_method": "plain"}, "invalid_request"),  # S256 only
        ({"resource": "https://other.example/mcp"}, "invalid_target"),  # RFC 8707: only this /mcp
        ({"response_type": "token"}, "unauthorized_client"),  # no implicit grant (RFC 6749 4.2.2.1)
    ],
    ids=["no PKCE", "plain PKCE", "foreign resource", "implicit"],
)
def test_an_authorization_request_outside_the_profile_goes_back_with_the_error(
    extra: dict[str, str], error: str, signed_in: Client, agent: Agent
) -> None:
    client_id = register(signed_in)
    _verifier, challenge = pkce()
    resp = signed_in.get(authorize_query(client_id, challenge, **extra))
    assert resp.status_code == 302, resp.content[:1000]
    assert query_of(resp["Location"])["error"] == error
    assert query_of(resp["Location"])["state"] == "st-1"
    assert not AgentGrant.objects.exists()


def test_a_token_request_for_another_resource_is_invalid_target(signed_in: Client, agent: Agent) -> None:
    client_id = register(signed_in)
    verifier, challenge = pkce()
    code = _code(signed_in, client_id, challenge, agent)
    resp = exchange(signed_in, client_id, code, verifier, resource="https://other.example/mcp")
    assert (resp.status_code, resp.json()["error"]) == (400, "invalid_target")


def test_the_person_may_pick_only_their_own_active_agents(signed_in: Client, agent: Agent) -> None:
    other_owner = User.objects.create_user("bob", password="pw-bob-12345")
    foreign = agent_create(actor=Actor.system("tests"), name="bob-bot", owner=other_owner)
    client_id = register(signed_in)
    _verifier, challenge = pkce()
    assert "bob-bot" not in signed_in.get(authorize_query(client_id, challenge)).content.decode()
    resp = signed_in.post(
        "/oauth/authorize/",
        {
            "client_id": client_id,
            "redirect_uri": CALLBACK,
            "response_type": "code",
            "state": "st-1",
            "scope": "rewind:read",
            "code_challenge": challenge,
            "code_challenge_method": "S256",
            "agent": foreign.name,
            "granted": ["rewind:read"],
            "allow": "Allow",
        },
    )
    assert resp.status_code == 200  # the form again, with the error
    assert not AgentGrant.objects.exists()


def test_cancel_goes_back_with_access_denied(signed_in: Client, agent: Agent) -> None:
    client_id = register(signed_in)
    _verifier, challenge = pkce()
    back = consent_post(signed_in, client_id, challenge, agent.name, allow="")
    assert query_of(back)["error"] == "access_denied"
    assert not AgentGrant.objects.exists()


def test_a_person_without_the_permission_to_issue_tokens_cannot_consent(db: None, agent: Agent) -> None:
    staff = User.objects.create_user("sam", password="pw-sam-12345", is_staff=True)
    staff_browser = Client()
    staff_browser.force_login(staff)
    client_id = register(staff_browser)
    _verifier, challenge = pkce()
    resp = staff_browser.get(authorize_query(client_id, challenge))
    assert resp.status_code == 403
    assert 'id="consent-forbidden"' in resp.content.decode()


def test_dynamic_client_registration_can_be_switched_off(signed_in: Client, settings: Any) -> None:
    settings.OAUTH2_PROVIDER = {**settings.OAUTH2_PROVIDER, "DCR_ENABLED": False}
    resp = signed_in.post("/oauth/register/", data="{}", content_type="application/json")
    assert resp.status_code == 404
    assert "registration_endpoint" not in signed_in.get("/.well-known/oauth-authorization-server").json()


def test_an_agent_made_at_consent_is_the_persons_who_still_may_not_approve_its_recoveries(
    signed_in: Client, person: User
) -> None:
    from datetime import timedelta

    from django.utils import timezone

    from recoveries.models import RecoveryRequest
    from recoveries.services import recovery_request_approve
    from rewind.lib.errors import PermissionDeniedError

    client_id = register(signed_in)
    _verifier, challenge = pkce()
    back = consent_post(signed_in, client_id, challenge, "", new_agent="alice-new")
    assert "code" in query_of(back)
    agent = Agent.objects.get(name="alice-new")
    assert AgentGrant.objects.get().agent == agent
    assert agent.owner == person
    pending = RecoveryRequest.objects.create(
        agent=agent, agent_name=agent.name, vm_identifier="vm-1", vm_name="web01", path="/etc/x",
        normalized_path="/etc/x", os="linux", reason="r", checkpoint_identifier="cp",
        checkpoint_source="latest_tagged", vpg_identifier="vpg", vpg_name="vpg", recovery_site_identifier="s",
        expires_at=timezone.now() + timedelta(hours=1),
    )  # fmt: skip
    with pytest.raises(PermissionDeniedError, match="you own agent alice-new"):
        recovery_request_approve(recovery_id=pending.pk, user=person)
