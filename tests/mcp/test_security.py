"""/mcp refuses what it should: bad tokens, bad Host/Origin, oversized or malformed bodies, floods."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx2
import pytest
from django.utils import timezone

from rewind.agents import agent_token_revoke, agent_update
from rewind.audit import Actor
from rewind.models import AgentToken
from tests.helpers import call_body, post, rpc_result, run
from tests.mcpfixtures import make_agent_token, run_uvicorn


def test_it_answers_a_call_with_a_valid_token(mcp_server: Any, mcp_sites: Any, agent_token: Any) -> None:
    resp = post(mcp_server.mcp_url, call_body(), agent_token[1])
    assert resp.status_code == 200
    assert rpc_result(resp)["result"]["structuredContent"]["vm_name"] == "web01"


HOW_TO_GET_ONE = (
    "get one with manage.py mcpconfig AGENT --client CLIENT on the server, or in the admin "
    "(/admin/rewind/agent/, open the agent, then Connect an agent), and send it as Authorization: Bearer TOKEN."
)
NONE_SENT = (
    "This MCP endpoint needs an agent's bearer token, and none was sent: sign in with OAuth, or " + HOW_TO_GET_ONE
)
REFUSED = (
    "The bearer token was refused (unknown, revoked or expired, or its agent is inactive): sign in with OAuth "
    "again, or " + HOW_TO_GET_ONE
)
ALL_SCOPES = "rewind:read rewind:guard rewind:recover rewind:sessions rewind:catalog"


def _assert_401(resp: httpx2.Response, sent: str | None = None, says: str = REFUSED) -> None:
    """A 401 whose challenge points at the metadata a host signs in from, and whose body and challenge say,
    in one sentence, how to get a token, and quote none. No error code when no token was sent (RFC 6750 3.1)."""
    assert resp.status_code == 401
    challenge = resp.headers["www-authenticate"]
    origin = str(resp.request.url).removesuffix("/mcp")
    start = f'Bearer resource_metadata="{origin}/.well-known/oauth-protected-resource/mcp", scope="{ALL_SCOPES}"'
    error = "invalid_request" if says == NONE_SENT else "invalid_token"
    if says == NONE_SENT:
        assert challenge == start
    else:
        assert challenge == f'{start}, error="invalid_token", error_description="{says}"'
    assert resp.json() == {"error": error, "error_description": says}
    if sent:
        assert sent not in resp.text
        assert sent not in challenge


def test_it_refuses_a_missing_token(mcp_server: Any, transactional_db: None) -> None:
    _assert_401(post(mcp_server.mcp_url, call_body()), says=NONE_SENT)


@pytest.mark.parametrize("authorization", ["Basic cm9vdDpwdw==", "Bearer", "Token rwd_abc"])
def test_it_refuses_an_authorization_header_that_holds_no_bearer_token(
    authorization: str, mcp_server: Any, transactional_db: None
) -> None:
    resp = post(mcp_server.mcp_url, call_body(), Authorization=authorization)
    _assert_401(resp, authorization.partition(" ")[2], NONE_SENT)


def test_it_refuses_an_unknown_token(mcp_server: Any, transactional_db: None) -> None:
    for token in ("rwd_" + "x" * 43, "not-even-our-format", " rwd_" + "x" * 43, "rwd_" + "z" * 300):
        _assert_401(post(mcp_server.mcp_url, call_body(), token), token.strip())


def test_it_refuses_a_revoked_token(mcp_server: Any, transactional_db: None) -> None:
    _, token = make_agent_token()
    row = AgentToken.objects.get()
    assert agent_token_revoke(actor=Actor.system("tests"), token=row)
    _assert_401(post(mcp_server.mcp_url, call_body(), token), token)


def test_it_refuses_before_reading_a_body_it_would_refuse_anyway(mcp_server: Any, transactional_db: None) -> None:
    from django.conf import settings

    resp = post(mcp_server.mcp_url, call_body(vm="x" * (settings.MCP_MAX_BODY_BYTES + 10)))
    _assert_401(resp, says=NONE_SENT)


def test_it_refuses_an_expired_token(mcp_server: Any, transactional_db: None) -> None:
    _, token = make_agent_token(expires_at=timezone.now() + timedelta(days=1))
    AgentToken.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    _assert_401(post(mcp_server.mcp_url, call_body(), token))


def test_it_refuses_the_token_of_an_inactive_agent(mcp_server: Any, transactional_db: None) -> None:
    agent, token = make_agent_token()
    agent_update(actor=Actor.system("tests"), agent=agent, is_active=False)
    _assert_401(post(mcp_server.mcp_url, call_body(), token))


def test_it_records_when_a_token_was_last_used(mcp_server: Any, mcp_sites: Any, agent_token: Any) -> None:
    assert AgentToken.objects.get().last_used_at is None
    post(mcp_server.mcp_url, call_body(), agent_token[1])
    assert AgentToken.objects.get().last_used_at is not None


def test_it_publishes_the_metadata_a_host_signs_in_from(mcp_server: Any) -> None:
    resource = httpx2.get(mcp_server.url + "/.well-known/oauth-protected-resource/mcp", timeout=10).json()
    assert resource["resource"] == mcp_server.mcp_url
    assert resource["authorization_servers"] == [mcp_server.url]
    server = httpx2.get(mcp_server.url + "/.well-known/oauth-authorization-server", timeout=10).json()
    assert server["issuer"] == mcp_server.url
    assert server["code_challenge_methods_supported"] == ["S256"]
    assert server["token_endpoint_auth_methods_supported"] == ["none"]
    assert server["grant_types_supported"] == ["authorization_code", "refresh_token"]
    assert server["client_id_metadata_document_supported"] is True
    assert server["registration_endpoint"] == mcp_server.url + "/oauth/register/"


def test_it_refuses_a_foreign_host_header(mcp_server: Any, agent_token: Any) -> None:
    resp = post(mcp_server.mcp_url, call_body(), agent_token[1], Host="evil.example")
    assert resp.status_code == 421


def test_it_refuses_a_foreign_origin(mcp_server: Any, agent_token: Any) -> None:
    resp = post(mcp_server.mcp_url, call_body(), agent_token[1], Origin="http://evil.example")
    assert resp.status_code == 403


def test_it_accepts_an_allowed_host_on_any_port_and_its_origin(
    mcp_server: Any, mcp_sites: Any, agent_token: Any
) -> None:
    resp = post(mcp_server.mcp_url, call_body(), agent_token[1], Host="localhost:1234", Origin="http://localhost:3000")
    assert resp.status_code == 200


def test_it_refuses_an_oversized_body_with_a_json_rpc_error(mcp_server: Any, agent_token: Any) -> None:
    from django.conf import settings

    body = call_body(vm="x" * (settings.MCP_MAX_BODY_BYTES + 10))
    resp = post(mcp_server.mcp_url, body, agent_token[1])
    assert resp.status_code == 413
    error = resp.json()["error"]
    assert error["code"] == -32600
    assert "too large" in error["message"]


def test_it_answers_malformed_json_rpc_with_a_json_rpc_error(mcp_server: Any, agent_token: Any) -> None:
    resp = post(mcp_server.mcp_url, b"{not json", agent_token[1])
    assert resp.status_code == 400
    assert resp.json()["error"]["code"] == -32700
    resp = post(mcp_server.mcp_url, {"jsonrpc": "2.0", "id": 1, "params": {}}, agent_token[1])
    assert resp.status_code == 400
    assert resp.json()["error"]["code"] in (-32600, -32602)


@pytest.mark.process
def test_it_rate_limits_an_agent(tmp_path: Any, transactional_db: None, sim: Any) -> None:
    from tests.fixtures import register_sites
    from tests.helpers import test_database_url

    register_sites(sim, {"Site A": "site-a"})
    _, token = make_agent_token()
    _, other = make_agent_token()
    limit = 3
    with run_uvicorn(
        tmp_path, database_url=test_database_url(), workers=1, env={"MCP_RATE_LIMIT_PER_MINUTE": str(limit)}
    ) as server:
        statuses = [post(server.mcp_url, call_body(rpc_id=i), token).status_code for i in range(limit + 2)]
        assert statuses[:limit] == [200] * limit
        refused = post(server.mcp_url, call_body(rpc_id=99), token)
        assert refused.status_code == 429
        assert int(refused.headers["retry-after"]) >= 1
        error = refused.json()
        assert error["id"] == 99
        assert "rate limit" in error["error"]["message"]
        # The limit is per agent: another agent is not held back.
        assert post(server.mcp_url, call_body(), other).status_code == 200


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_the_python_client_reports_a_refused_token(mode: str, mcp_client: Any, transactional_db: None) -> None:
    async def connect() -> None:
        async with mcp_client("rwd_" + "y" * 43, mode) as client:
            await client.list_tools()

    # The SDK wraps the 401 in an exception group whose type differs by transport and version.
    with pytest.raises(BaseException) as caught:  # noqa: PT011
        run(connect())
    assert (
        "401" in repr(caught.value)
        or "error response" in repr(caught.value).lower()
        or "Unauthorized" in repr(caught.value)
    )
