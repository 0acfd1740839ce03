"""Shared fixtures: a real Celery worker, and the plugins every package gets: the ZVM simulator
(tests.simfixtures), the quick run's markers (tests.markers), sites and personas (tests.fixtures), uvicorn and MCP clients (tests.mcpfixtures),
the production shape on a PostgreSQL and a Redis of its own (tests.stackfixtures), and real third-party
MCP servers as upstreams (tests.upstreamfixtures)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from django.db import connection

if TYPE_CHECKING:
    # Imported where used: a module imported here, before pytest_plugins is read, would miss
    # pytest's assertion rewriting (the plugins import each other).
    from tests.helpers import WorkerProcess

pytest_plugins = [
    "tests.markers",
    "tests.simfixtures",
    "tests.fixtures",
    "tests.mcpfixtures",
    "tests.stackfixtures",
    "tests.upstreamfixtures",
    "tests.secretscan",
]


# Playwright's sync API runs an event loop in the test thread; Django's ORM must still be
# callable from fixtures there.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Under ``REWIND_TESTS_NO_SKIPS=1`` (``.ci/run`` sets it) a skipped test fails, saying why.

    Every skip here names what is missing (Chromium, Node's packages, Redis); CI installs all of
    it, so a skip there means its install broke, and it must not pass unnoticed.
    """
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.skipped and os.environ.get("REWIND_TESTS_NO_SKIPS") == "1" and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped where nothing may be skipped (REWIND_TESTS_NO_SKIPS=1): {reason}"


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup: None, django_db_blocker: Any) -> Iterator[None]:
    """pytest-django's test database, let go of by this process's own threads before it is dropped.

    Every session fixture that starts a process on the test database (the Celery worker,
    uvicorn) depends on this fixture, so it is stopped, its processes gone, before this
    teardown runs; then the MCP audit writer thread closes its connections. PostgreSQL
    refuses to drop a database anyone is still connected to.
    """
    yield
    from rewind.mcp.auditlog import audit_writer
    from rewind.sites.zvm_shared import request_counts_flush

    request_counts_flush()  # its timer would connect again once the database is going
    audit_writer.close_connections()
    if connection.vendor == "postgresql":
        # Threads of this process that ran ORM code (anyio workers behind in-process MCP
        # calls, a task's VPG threads) keep idle connections Django never closes; end them
        # so the drop cannot fail with "database is being accessed by other users". A thread
        # still polling would connect again before the drop: the database takes no new ones first
        # (said from another database: none may refuse connections to the one it is on).
        import psycopg

        name = connection.settings_dict["NAME"]
        with django_db_blocker.unblock():
            connection.close_if_unusable_or_obsolete()  # a test may have ended this one too
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                (own,) = cursor.fetchone()
        params = {**connection.get_connection_params(), "dbname": "postgres"}
        params.pop("cursor_factory", None)
        with psycopg.connect(**params, autocommit=True) as admin:
            admin.execute(f"ALTER DATABASE {connection.ops.quote_name(name)} WITH ALLOW_CONNECTIONS false")
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> %s", [name, own]
            )


def _purge_broker() -> None:
    from rewind.celery import app

    with app.connection_for_write() as conn:
        app.control.purge(connection=conn)


@pytest.fixture(scope="session")
def celery_worker_process(
    django_db_setup: None, django_db_blocker: object, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorkerProcess]:
    _purge_broker()
    from tests.helpers import WorkerProcess

    worker = WorkerProcess(tmp_path_factory.mktemp("celery") / "worker.log")
    worker.start()
    yield worker
    worker.stop()


@pytest.fixture
def worker(celery_worker_process: WorkerProcess, transactional_db: None) -> WorkerProcess:
    """A running worker; the test's data is committed so the worker can see it."""
    if not celery_worker_process.running():
        celery_worker_process.start()
    return celery_worker_process


@pytest.fixture(autouse=True)
def _zvm_cap_out_of_the_way(settings: Any) -> None:
    """The suite's own processes send up to 1000 requests/s per simulated ZVM, not the 10 of production.

    Tests that time their own waits (caches, polling) were written without a cap; the cap's
    own tests (tests/zvm/test_cap.py, tests/rewind/test_zvm_shared.py) set theirs. Processes
    the tests start (a Celery worker) read the environment and so run at the default.
    """
    settings.ZVM_MAX_REQUESTS_PER_S = 1000.0


@pytest.fixture(autouse=True)
def _audit_anchors_of_the_test(settings: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test anchors its audit chain in a file of its own, and so do the processes it starts.

    Anchors are published by every process that stops (a server's, a worker's), by the beat and
    by audit_verify: one file for the whole run would hold anchors of other tests' chains, which
    the next test's audit_verify would hold against its own.
    """
    anchors = tmp_path / "audit-anchors.jsonl"
    settings.REWIND_AUDIT_ANCHOR_FILE = anchors
    monkeypatch.setenv("REWIND_AUDIT_ANCHOR_FILE", str(anchors))


@pytest.fixture(autouse=True)
def _zvm_stores_per_process_unless_transactional(request: pytest.FixtureRequest) -> Iterator[None]:
    """Outside transactional tests, ZVM caps and tokens are kept per process, as without Django.

    A test whose database is one open transaction holds SQLite's write lock from start to
    end, so the database stores, which write on every ZVM call, would make a call from any
    other thread (MCP worker threads, a guard's VPG threads) wait 20 s for it. Transactional
    tests, and the Celery worker and servers they start, use the stores the settings choose.
    """
    from rewind.sites.zvm_shared import shared_stores
    from rewind.zvm import Stores, use_shared_stores

    marker = request.node.get_closest_marker("django_db")
    transactional = bool(marker and marker.kwargs.get("transaction")) or any(
        name in request.fixturenames for name in ("transactional_db", "live_server", "django_db_serialized_rollback")
    )
    if transactional:
        yield
        return
    use_shared_stores(Stores)
    try:
        yield
    finally:
        use_shared_stores(shared_stores)


@pytest.fixture(autouse=True)
def _zvm_requests_counted_within_the_test(django_db_blocker: Any) -> Iterator[None]:
    """A test's ZVM requests are written to the shared count when it ends, not by a timer during the next
    test (which may have no database access; rewind.sites.requestcount)."""
    yield
    from rewind.sites.zvm_shared import request_counts_flush

    with django_db_blocker.unblock():
        request_counts_flush()


@pytest.fixture(autouse=True)
def _site_circuits_closed() -> None:
    """Every test starts with each site's circuit closed in this process (rewind.zvm.breaker).

    Circuits kept per process outlive a test: one whose ZVM hung would refuse the next
    test's calls to the same simulated address. Shared ones live in the test's database, or
    in Redis for the tests that point at it (they clear their own keys).
    """
    from rewind.sites.circuit import clear_local_circuits
    from rewind.zvm.breaker import LOCAL_BREAKER

    LOCAL_BREAKER.clear()
    clear_local_circuits()
    return


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict[str, Any]) -> dict[str, Any]:
    """Debian's Chromium (playwright cannot download its own here), for every browser test."""
    return {
        **browser_type_launch_args,
        "executable_path": "/usr/bin/chromium",
        "args": [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ],
    }


@pytest.fixture
def page(page: Any) -> Iterator[Any]:
    """pytest-playwright's page, failing the test on any Content Security Policy violation it reports.

    Every browser test thereby proves that the pages it opens run under the policy (SECURE_CSP):
    nothing inline, nothing from elsewhere.
    """
    violations: list[str] = []

    def on_console(message: Any) -> None:
        if "Content Security Policy" in message.text:
            violations.append(f"{page.url}: {message.text}")

    page.on("console", on_console)
    yield page
    assert violations == [], "\n".join(violations)
