"""Fixtures for OAuth tests: a server that may fetch client metadata documents from the test's own HTTPS server."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.mcpfixtures import UvicornServer, run_uvicorn
from tests.oauth.support import DocumentServer, ProxiedServer, ReverseProxy


@pytest.fixture(scope="session")
def cimd_documents(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DocumentServer]:
    server = DocumentServer(tmp_path_factory.mktemp("cimd-certs"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def cimd_mcp_server(
    django_db_setup: None, tmp_path_factory: pytest.TempPathFactory, cimd_documents: DocumentServer
) -> Iterator[UvicornServer]:
    """uvicorn as an operator would run it for an internal client: 127.0.0.1 allowed, the documents' CA trusted."""
    from tests.helpers import test_database_url

    env: dict[str, Any] = {
        "REWIND_OAUTH_CIMD_ALLOWED_NETWORKS": "127.0.0.1/32",
        "SSL_CERT_FILE": str(cimd_documents.certs.ca),
    }
    with run_uvicorn(
        tmp_path_factory.mktemp("uvicorn-cimd"), database_url=test_database_url(), workers=1, env=env
    ) as server:
        yield server


@pytest.fixture(scope="session")
def proxied_mcp_server(django_db_setup: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxiedServer]:
    """uvicorn behind a reverse proxy that forwards with the upstream's Host, as deployed: REWIND_PUBLIC_URL is
    the proxy's address (localhost, where the service sees 127.0.0.1), and so are the trusted CSRF origins."""
    from tests.helpers import test_database_url
    from tests.mcpfixtures import free_port

    port = free_port()
    public = f"http://localhost:{port}"
    env = {"REWIND_PUBLIC_URL": public, "DJANGO_CSRF_TRUSTED_ORIGINS": public}
    with run_uvicorn(
        tmp_path_factory.mktemp("uvicorn-proxied"), database_url=test_database_url(), workers=1, env=env
    ) as server:
        proxy = ReverseProxy(server.port, listen_port=port)
        try:
            yield ProxiedServer(server, proxy, public)
        finally:
            proxy.stop()
