"""A host that speaks only the MCP authorization flow signs in, a person consents as one of their agents,
and the host calls tools as that agent: the official Python SDK's OAuth client and real Chromium."""

from __future__ import annotations

from typing import Any

import httpx2
import pytest
from django.contrib.auth.models import User
from oauth2_provider.models import Application

from rewind.agents import agent_create
from rewind.audit import Actor
from rewind.models import Agent, AgentGrant, AuditEvent
from rewind.oauth.services import agent_grant_revoke
from tests.helpers import post
from tests.markers import NEEDS_CHROMIUM
from tests.oauth.support import CALLBACK, NodeOAuthHost, OAuthHost, consent, oauth_token

pytestmark = [
    pytest.mark.timeout(300),
    NEEDS_CHROMIUM,
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


def test_a_read_only_grant_finds_but_cannot_guard_refreshes_with_rotation_and_ends_when_revoked(
    mcp_server: Any, mcp_sites: Any, page: Any
) -> None:
    alice = _person()
    host = OAuthHost(mcp_server.mcp_url, client_name="Read-only host")

    async def work(client: Any) -> Any:
        found = await client.call_tool("zerto_find_protection", {"vm": "web01"})
        return found, {t.name for t in (await client.list_tools()).tools}

    run = host.start(work)
    consent(
        page,
        host,
        new_agent="alice-reader",
        untick=("rewind:guard", "rewind:recover", "rewind:sessions", "rewind:catalog"),
        credentials=("alice", PASSWORD),
    )
    found, names = run.wait()
    assert not found.is_error
    assert "zerto_guard_before_mutate" not in names
    assert "zerto_find_protection" in names
    grant = AgentGrant.objects.get()
    assert (grant.agent.name, grant.agent.owner, grant.scope) == ("alice-reader", alice, "rewind:read")
    token = host.storage.tokens.access_token

    guard = _call("zerto_guard_before_mutate", {"tool": "ssh/exec", "arguments": {"host": "web01"}})
    refused = post(mcp_server.mcp_url, guard, token)
    assert refused.status_code == 403
    assert 'scope="rewind:guard"' in refused.headers["www-authenticate"]

    # Refresh tokens rotate: the new pair works, the old refresh token is refused (and ends its family).
    old_refresh = host.storage.tokens.refresh_token
    fresh = _token_request(
        mcp_server.url, grant_type="refresh_token", refresh_token=old_refresh, client_id=_client(grant)
    )
    assert fresh.status_code == 200, fresh.text
    assert fresh.json()["refresh_token"] != old_refresh
    assert fresh.json()["scope"] == "rewind:read"
    assert (
        post(
            mcp_server.mcp_url, _call("zerto_find_protection", {"vm": "web01"}), fresh.json()["access_token"]
        ).status_code
        == 200
    )
    reused = _token_request(
        mcp_server.url, grant_type="refresh_token", refresh_token=old_refresh, client_id=_client(grant)
    )
    assert (reused.status_code, reused.json()["error"]) == (400, "invalid_grant")

    # Revoking the grant ends its tokens at once, in every worker (they are not cached).
    assert agent_grant_revoke(actor=Actor.user("root"), grant=grant)
    for _ in range(4):  # uvicorn runs two workers: each refuses it
        gone = post(mcp_server.mcp_url, _call("zerto_find_protection", {"vm": "web01"}), token)
        assert gone.status_code == 401
        assert 'error="invalid_token"' in gone.headers["www-authenticate"]
    assert AuditEvent.objects.filter(action="oauth.grant.revoked", actor="root").exists()


def _call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": name, "arguments": arguments}}


def _client(grant: AgentGrant) -> str:
    return str(grant.application.client_id)


def _token_request(base: str, **form: str) -> httpx2.Response:
    return httpx2.post(f"{base}/oauth/token/", data=form, timeout=30)


def test_the_typescript_sdk_signs_in_by_dynamic_registration_and_finds_a_vm(
    mcp_server: Any, mcp_sites: Any, page: Any, node_mcp_client: Any
) -> None:
    alice = _person()
    agent_create(actor=Actor.system("tests"), name="ts-bot", owner=alice)
    host = NodeOAuthHost(node_mcp_client, mcp_server.mcp_url, "web01")
    # The page ticks only the narrowest scope asked for; the person ticks the guard too.
    shown = consent(page, host, agent="ts-bot", tick=("rewind:guard",), credentials=("alice", PASSWORD))
    out = host.result()
    assert shown["client"] == "TypeScript host"
    assert out["structuredContent"]["vm_name"] == "web01"
    assert "zerto_guard_before_mutate" in out["tools"]
    grant = AgentGrant.objects.get()
    assert grant.agent.name == "ts-bot"
    assert grant.application.client_id == out["clientId"]
    assert grant.application.registration_source == Application.RegistrationSource.DCR


def test_both_sdks_sign_in_by_metadata_document_and_find_a_vm(
    cimd_mcp_server: Any, cimd_documents: Any, mcp_sites: Any, page: Any, node_mcp_client: Any
) -> None:
    alice = _person()
    agent_create(actor=Actor.system("tests"), name="doc-bot", owner=alice)
    py_id = cimd_documents.client_document("/python-host.json", name="Python host by document")
    host = OAuthHost(cimd_mcp_server.mcp_url, client_metadata_url=py_id)

    async def work(client: Any) -> Any:
        return await client.call_tool("zerto_find_protection", {"vm": "web01"})

    run = host.start(work)
    shown = consent(page, host, agent="doc-bot", credentials=("alice", PASSWORD))
    found = run.wait()
    assert shown["client"] == "Python host by document"
    assert found.structured_content["vm_name"] == "web01"

    ts_id = cimd_documents.client_document("/ts-host.json", name="TypeScript host by document")
    node = NodeOAuthHost(node_mcp_client, cimd_mcp_server.mcp_url, "web01", client_metadata_url=ts_id)
    shown = consent(page, node, agent="doc-bot")  # signed in already
    out = node.result()
    assert shown["client"] == "TypeScript host by document"
    assert out["clientId"] == ts_id
    assert out["structuredContent"]["vm_name"] == "web01"

    for client_id in (py_id, ts_id):
        grant = AgentGrant.objects.get(application__client_id=client_id)
        assert grant.agent.name == "doc-bot"
        assert grant.application.registration_source == Application.RegistrationSource.CIMD
    assert set(cimd_documents.requests) >= {"/python-host.json", "/ts-host.json"}


def test_behind_a_reverse_proxy_the_audience_is_the_public_address_not_the_host_the_service_sees(
    proxied_mcp_server: Any, mcp_sites: Any, page: Any
) -> None:
    """The known pitfall: the proxy forwards Host 127.0.0.1:<upstream>, the client addresses localhost:<proxy>."""
    server = proxied_mcp_server
    alice = _person()
    agent_create(actor=Actor.system("tests"), name="proxied-bot", owner=alice)
    metadata = httpx2.get(f"{server.public_url}/.well-known/oauth-protected-resource/mcp", timeout=10).json()
    assert metadata["resource"] == server.mcp_url
    assert metadata["authorization_servers"] == [server.public_url]
    host = OAuthHost(server.mcp_url, client_name="Proxied host")

    async def work(client: Any) -> Any:
        return await client.call_tool("zerto_find_protection", {"vm": "web01"})

    run = host.start(work)
    consent(page, host, agent="proxied-bot", credentials=("alice", PASSWORD))
    found = run.wait()
    assert found.structured_content["vm_name"] == "web01"
    assert set(server.proxy.seen_hosts) == {f"127.0.0.1:{server.upstream.port}"}
    from oauth2_provider.models import AccessToken

    assert AccessToken.objects.exclude(scope="oauth2_provider:registration").get().resource == [server.mcp_url]
    # A token bound to the address the service sees behind the proxy is for another resource.
    inside = oauth_token(alice, Agent.objects.get(name="proxied-bot"), resource=server.upstream.mcp_url)
    refused = post(server.mcp_url, _call("zerto_find_protection", {"vm": "web01"}), inside)
    assert refused.status_code == 401
