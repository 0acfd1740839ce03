"""Client ID Metadata Documents: a client whose client_id is an https URL is fetched, bounded in size and
time, and never from a private, loopback or link-local address unless the operator allowed that network.

The documents come from an HTTPS server the test runs on 127.0.0.1: the strict default refuses it, which is
the point of the first test; the others allow 127.0.0.1 and trust the server's CA, as an operator would for an
internal client.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from django.test import Client
from oauth2_provider.cimd import CIMDError
from oauth2_provider.models import Application

from rewind.agents import agent_create
from rewind.audit import Actor
from rewind.oauth.cimd import MetadataFetcher, address_allowed
from tests.oauth.support import (
    Document,
    DocumentServer,
    authorize_query,
    consent_post,
    exchange,
    pkce,
    query_of,
    token_request,
)


@pytest.fixture
def docs(tmp_path: Path) -> Iterator[DocumentServer]:
    server = DocumentServer(tmp_path / "certs")
    yield server
    server.stop()


@pytest.fixture
def trusted(docs: DocumentServer, settings: Any, monkeypatch: pytest.MonkeyPatch) -> DocumentServer:
    """The operator allowed 127.0.0.1 and trusts the document server's CA."""
    settings.REWIND_OAUTH_CIMD_ALLOWED_NETWORKS = [ipaddress.ip_network("127.0.0.1/32")]
    monkeypatch.setenv("SSL_CERT_FILE", str(docs.certs.ca))
    cache.clear()  # the toolkit backs off a failed URL for a minute
    return docs


@pytest.mark.parametrize(
    "address",
    ["127.0.0.1", "::1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254", "fe80::1", "::ffff:127.0.0.1"],
)
def test_the_strict_default_refuses_private_loopback_and_link_local_addresses(address: str) -> None:
    assert not address_allowed(address)


def test_a_public_address_is_allowed_and_an_allowed_network_only_what_it_names(settings: Any) -> None:
    assert address_allowed("93.184.215.14")
    settings.REWIND_OAUTH_CIMD_ALLOWED_NETWORKS = [ipaddress.ip_network("10.0.0.0/8")]
    assert address_allowed("10.1.2.3")
    assert not address_allowed("127.0.0.1")


def test_the_strict_default_never_connects_to_a_loopback_document(docs: DocumentServer, monkeypatch: Any) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(docs.certs.ca))
    client_id = docs.client_document("/client.json")
    with pytest.raises(CIMDError, match=r"non-public address \(127\.0\.0\.1\)"):
        MetadataFetcher().fetch(client_id)
    assert docs.requests == []  # refused before any connection


def test_an_allowed_document_is_fetched(trusted: DocumentServer) -> None:
    client_id = trusted.client_document("/client.json")
    metadata, _max_age = MetadataFetcher().fetch(client_id)
    assert metadata["client_id"] == client_id


def test_a_document_answering_too_slowly_is_refused(trusted: DocumentServer, settings: Any) -> None:
    settings.OAUTH2_PROVIDER = {**settings.OAUTH2_PROVIDER, "CIMD_FETCH_TIMEOUT_SECONDS": 0.5}
    client_id = trusted.client_document("/slow.json")
    trusted.documents["/slow.json"].delay_s = 30
    with pytest.raises(CIMDError, match="could not fetch"):
        MetadataFetcher().fetch(client_id)


def test_a_document_too_large_is_refused(trusted: DocumentServer) -> None:
    client_id = trusted.client_document("/large.json", padding="x" * 20_000)
    with pytest.raises(CIMDError, match="exceeds the maximum allowed size"):
        MetadataFetcher().fetch(client_id)


@pytest.fixture
def signed_in(db: None) -> Client:
    person = User.objects.create_superuser("alice", "alice@example.com", "pw-alice-12345")
    agent_create(actor=Actor.system("tests"), name="alice-bot", owner=person)
    client = Client()
    client.force_login(person)
    return client


def test_a_metadata_document_client_is_registered_on_first_sight_and_gets_tokens(
    trusted: DocumentServer, signed_in: Client
) -> None:
    """The known pitfall: a client registered from its document must then also get its tokens."""
    client_id = trusted.client_document("/client.json")
    verifier, challenge = pkce()
    page = signed_in.get(authorize_query(client_id, challenge)).content.decode()
    assert "Metadata-document host" in page
    assert client_id in page  # the page says where the name comes from
    app = Application.objects.get(client_id=client_id)
    assert app.registration_source == Application.RegistrationSource.CIMD
    back = consent_post(signed_in, client_id, challenge, "alice-bot")
    code = query_of(back)["code"]
    resp = exchange(signed_in, client_id, code, verifier, resource="http://testserver/mcp")
    assert resp.status_code == 200, resp.content
    refreshed = token_request(
        signed_in, grant_type="refresh_token", refresh_token=resp.json()["refresh_token"], client_id=client_id
    )
    assert refreshed.status_code == 200, refreshed.content


@pytest.mark.parametrize(
    ("path", "document"),
    [
        ("/private.json", None),  # strict default below: never fetched
        ("/slow.json", Document(b"{}", delay_s=30)),
        ("/large.json", Document(b"{" + b" " * 20_000 + b"}")),
        ("/other.json", None),  # a document naming another client_id
    ],
    ids=["private address", "too slow", "too large", "another client_id"],
)
def test_an_authorization_request_from_a_document_that_fails_is_an_unknown_client_never_redirected(
    path: str, document: Document | None, docs: DocumentServer, signed_in: Client, settings: Any, monkeypatch: Any
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(docs.certs.ca))
    cache.clear()
    settings.OAUTH2_PROVIDER = {**settings.OAUTH2_PROVIDER, "CIMD_FETCH_TIMEOUT_SECONDS": 0.5}
    if path != "/private.json":
        settings.REWIND_OAUTH_CIMD_ALLOWED_NETWORKS = [ipaddress.ip_network("127.0.0.1/32")]
    client_id = docs.url(path)
    if document is not None:
        docs.documents[path] = document
    elif path == "/other.json":
        docs.client_document(path)
        docs.documents[path].body = docs.documents[path].body.replace(b"/other.json", b"/someone-else.json")
    _verifier, challenge = pkce()
    resp = signed_in.get(authorize_query(client_id, challenge))
    assert resp.status_code in (400, 401), resp.status_code
    assert "invalid_" in resp.content.decode()
    assert "Location" not in resp
    assert not Application.objects.filter(client_id=client_id).exists()
