"""pytest plugin: the app under a real uvicorn, agents with tokens, and MCP clients.

Fixtures:
- ``mcp_server`` (session): uvicorn with 2 workers serving ``rewind.asgi:application`` on the
  test database; ``.url`` (http://127.0.0.1:PORT), ``.mcp_url``.
- ``mcp_sites`` (function, committed data): sites "Site A" and "Site B" registered against the
  simulator (resets it); returns ``{"Site A": Site, "Site B": Site}``.
- ``agent_token`` (function, committed data): ``(agent, token)`` of a fresh agent.
- ``mcp_client``: ``mcp_client(token, mode="auto", url=None)`` → async context manager yielding
  an ``mcp.Client`` speaking streamable HTTP with the bearer token.
- ``node_mcp_client``: the folder of the TypeScript SDK client script (tests/mcp/node), whose
  packages its package-lock.json pins and ``npm ci --prefix tests/mcp/node`` installs (.ci/run
  does); skips, naming that command, when they are not installed.

``run_uvicorn(work_dir, env=..., workers=...)`` starts another server with other settings.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import httpx2
import pytest

from rewind.lib.processes import Proc, ProcessError, free_port
from tests.fixtures import register_sites
from tests.simfixtures import PYTHON, REPO, SimHandle

START_TIMEOUT = 60.0
_agent_numbers = itertools.count(1)


class UvicornServer:
    def __init__(self, proc: Proc, port: int) -> None:
        self.proc = proc
        self.port = port
        assert proc.log is not None
        self.log = proc.log
        self.url = f"http://127.0.0.1:{port}"
        self.mcp_url = f"{self.url}/mcp"

    def stop(self) -> None:
        """Stop uvicorn; returns once it and its workers are gone (their connections closed)."""
        self.proc.stop(timeout=15)


def start_uvicorn(
    work_dir: Path,
    *,
    database_url: str,
    workers: int = 2,
    env: dict[str, str] | None = None,
    app: str = "rewind.asgi:application",
) -> UvicornServer:
    """uvicorn on a free port; returns once every worker has finished its startup."""
    work_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    full_env = {**os.environ, "DATABASE_URL": database_url, "PYTHONUNBUFFERED": "1", **(env or {})}
    full_env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)  # the server must run as in production
    cmd = [
        PYTHON,
        "-m",
        "uvicorn",
        app,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        str(workers),
        "--no-access-log",
        "--timeout-graceful-shutdown",
        "5",
    ]
    proc = Proc("uvicorn", cmd, log=work_dir / f"uvicorn-{port}.log", cwd=REPO, env=full_env)
    server = UvicornServer(proc, port)
    try:
        proc.wait_for_output("Application startup complete.", count=workers, timeout=START_TIMEOUT)
    except ProcessError:
        server.stop()
        raise
    return server


@contextlib.contextmanager
def run_uvicorn(work_dir: Path, **kwargs: Any) -> Iterator[UvicornServer]:
    server = start_uvicorn(work_dir, **kwargs)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def mcp_server(django_db_setup: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[UvicornServer]:
    from tests.helpers import test_database_url

    with run_uvicorn(tmp_path_factory.mktemp("uvicorn"), database_url=test_database_url()) as server:
        yield server


@pytest.fixture
def mcp_sites(transactional_db: None, sim: SimHandle) -> dict[str, Any]:
    return register_sites(sim, {"Site A": "site-a", "Site B": "site-b"})


def make_agent_token(name: str | None = None, **token_kwargs: Any) -> tuple[Any, str]:
    from django.contrib.auth import get_user_model

    from rewind.agents import agent_create, agent_token_issue
    from rewind.audit import Actor

    owner, _ = get_user_model().objects.get_or_create(username="agent-owner", defaults={"is_superuser": True})
    actor = Actor.system("tests")
    agent = agent_create(actor=actor, name=name or f"agent-{os.getpid()}-{next(_agent_numbers)}", owner=owner)
    return agent, agent_token_issue(actor=actor, agent=agent, **token_kwargs).token


@pytest.fixture
def agent_token(transactional_db: None) -> tuple[Any, str]:
    return make_agent_token()


def bearer_http_client(token: str | None, **headers: str) -> httpx2.AsyncClient:
    if token is not None:
        headers = {"Authorization": f"Bearer {token}", **headers}
    return httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=60.0))


@contextlib.asynccontextmanager
async def open_mcp_client(url: str, token: str | None, mode: str = "auto") -> AsyncIterator[Any]:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async with bearer_http_client(token) as http:
        async with Client(streamable_http_client(url, http_client=http), mode=mode) as client:
            yield client


@pytest.fixture
def mcp_client(mcp_server: UvicornServer) -> Callable[..., AbstractAsyncContextManager[Any]]:
    def factory(token: str | None, mode: str = "auto", url: str | None = None) -> AbstractAsyncContextManager[Any]:
        return open_mcp_client(url or mcp_server.mcp_url, token, mode)

    return factory


NODE_CLIENT_DIR = REPO / "tests" / "mcp" / "node"
NODE_CLIENT_INSTALL = "npm ci --prefix tests/mcp/node"


@pytest.fixture(scope="session")
def node_mcp_client() -> Path:
    """The folder holding the TypeScript client scripts (client_v2.mjs, client_elicit.mjs) and their installed,
    lockfile-pinned packages.

    Never installs anything itself: a test run must not depend on the registry, nor take
    whatever version it serves that day.
    """
    if shutil.which("node") is None:
        pytest.skip(
            f"Node.js is not installed, so the TypeScript client cannot run: install Node.js 20+ and npm "
            f"(.ci/run does), then run `{NODE_CLIENT_INSTALL}`"
        )
    package = NODE_CLIENT_DIR / "node_modules" / "@modelcontextprotocol" / "client" / "package.json"
    if not package.exists():
        pytest.skip(f"the TypeScript MCP client is not installed: run `{NODE_CLIENT_INSTALL}` (.ci/run does)")
    return NODE_CLIENT_DIR
