"""pytest plugin: the markers of the quick run (``pytest -m "not process and not browser and not node"``).

- ``process``: the test starts a process of its own (a Celery worker, uvicorn, a simulator with
  other options, ``manage.py`` in a fresh interpreter) or needs one a fixture starts;
- ``browser``: it drives Chromium through Playwright;
- ``node``: it runs the TypeScript MCP client, or the conformance suites, under Node.

A test that asks for a fixture below gets its marker without saying so. One that starts a
process by hand must say ``@pytest.mark.process``: an unmarked test that starts one fails,
naming the marker, so the quick run can never start processes unnoticed. The session's
shared simulator (tests.simfixtures) is the one process every run has; it starts inside
``processes_allowed()``.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import threading
from collections.abc import Iterator
from typing import Any

import pytest

# The fixtures that start the process, browser or client themselves: a test's fixturenames
# hold every fixture it needs, those of its fixtures included (``worker``, ``mcp_client`` and
# ``page`` reach these), so naming the one that starts it is enough.
PROCESS_FIXTURES = frozenset(
    {
        "celery_worker_process",
        "mcp_server",
        "cimd_mcp_server",
        "proxied_mcp_server",
        "guestshell_http_server",
        "guestshell_stdio_command",
        "short_ttl_sim",
        "production_stack",
        # The real upstream servers (tests/upstreamfixtures.py); the stdio ones yield a command
        # whose client starts the server.
        "everything_http_server",
        "sdk1_stateful_http_server",
        "sdk1_stateless_http_server",
        "fastmcp_http_server",
        "ssh_host",
        "everything_stdio",
        "filesystem_stdio",
        "git_sdk1_stdio",
        "git_sdk2_stdio",
        "ssh_mcp_stdio",
    }
)
BROWSER_FIXTURES = frozenset({"browser"})
NODE_FIXTURES = frozenset({"node_mcp_client", "conformance_suites"})
MARKERS = ("process", "browser", "node")  # registered in pyproject.toml
# Browser tests drive the machine's Chromium (tests/conftest.py launches /usr/bin/chromium);
# under REWIND_TESTS_NO_SKIPS=1 (CI) this skip fails the run instead.
NEEDS_CHROMIUM = pytest.mark.skipif(
    shutil.which("chromium") is None, reason="Chromium is not installed (apt-get install chromium)"
)

_allowed = threading.local()
_real_popen_init = subprocess.Popen.__init__


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if names & PROCESS_FIXTURES:
            item.add_marker("process")
        if names & BROWSER_FIXTURES:
            item.add_marker("browser")
        if names & NODE_FIXTURES:
            item.add_marker("node")


@contextlib.contextmanager
def processes_allowed() -> Iterator[None]:
    """Let this thread start processes whatever the test's markers (the shared simulator)."""
    before = getattr(_allowed, "depth", 0)
    _allowed.depth = before + 1
    try:
        yield
    finally:
        _allowed.depth = before


def _refusing_popen_init(nodeid: str) -> Any:
    def init(self: subprocess.Popen[Any], *args: Any, **kwargs: Any) -> None:
        if getattr(_allowed, "depth", 0) == 0:
            raise AssertionError(
                f"{nodeid} starts a process ({args[0] if args else kwargs.get('args')!r}) but is not marked"
                " process: add @pytest.mark.process (or ask for a fixture that marks it) so the quick run leaves it out"
            )
        _real_popen_init(self, *args, **kwargs)

    return init


@pytest.fixture(autouse=True)
def _processes_only_when_marked(request: pytest.FixtureRequest) -> Iterator[None]:
    """Outside tests marked process, browser or node, starting a process fails the test."""
    if any(request.node.get_closest_marker(name) for name in MARKERS):
        yield
        return
    subprocess.Popen.__init__ = _refusing_popen_init(request.node.nodeid)  # type: ignore[method-assign]
    try:
        yield
    finally:
        subprocess.Popen.__init__ = _real_popen_init  # type: ignore[method-assign]
