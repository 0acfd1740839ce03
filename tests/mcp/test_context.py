"""What the framework gives tools (rewind/mcp/context.py): database retries, and errors that name the call's records."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import OperationalError
from mcp.server.mcpserver.exceptions import ToolError

from rewind.mcp.context import call_refers_to, call_refs, database_retried, refs_sentence
from rewind.mcp.server import _naming_refs
from tests.fixtures import wait_until


def _flaky(failures: int) -> tuple[list[int], Any]:
    tries: list[int] = []

    def fn() -> str:
        tries.append(1)
        if len(tries) <= failures:
            raise OperationalError("connection refused")
        return "answered"

    return tries, fn


def test_work_safe_to_repeat_is_tried_again_while_the_database_does_not_answer(settings: Any) -> None:
    settings.REWIND_DB_RETRY_S = 5.0
    tries, fn = _flaky(2)
    assert database_retried(fn, "a read") == "answered"
    assert len(tries) == 3


def test_it_gives_up_once_its_time_is_up_and_raises_what_the_database_said(settings: Any) -> None:
    settings.REWIND_DB_RETRY_S = 0.0
    tries, fn = _flaky(5)
    with pytest.raises(OperationalError, match="connection refused"):
        database_retried(fn, "a read")
    assert len(tries) == 1


def test_an_error_names_the_guard_and_change_id_the_call_referred_to() -> None:
    with call_refs() as refs:
        call_refers_to(change_id="chg-1", guard=None)
        assert refs_sentence(refs) == (
            "This call refers to change_id chg-1 (call again with it to get the same guard, never a second checkpoint)."
        )
        call_refers_to(guard=12)
        named = _naming_refs(
            ToolError("the call was not recorded in the audit log (request r1); treat it as failed"), refs
        )
    assert str(named).startswith("the call was not recorded in the audit log (request r1); treat it as failed. ")
    assert "guard #12 (zerto_checkpoint_status with id 12 tells its outcome)" in str(named)
    assert "change_id chg-1" in str(named)
    call_refers_to(guard=13)  # outside a call: nothing to name, nothing fails
    with call_refs() as nothing:
        assert _naming_refs(ToolError("plain"), nothing).args == ("plain",)


@pytest.mark.django_db(transaction=True)
def test_a_kept_connection_is_checked_by_its_socket_and_one_the_server_ended_is_replaced() -> None:
    """No SELECT 1 before a call's first query: a connection the server ended has said so on its socket."""
    import psycopg
    from django.db import connection as default_connection

    from rewind.mcp.context import _health_checked_by_its_socket

    connection: Any = default_connection  # its health-check flags are not in the type stubs

    if connection.vendor != "postgresql":
        pytest.skip("the check is PostgreSQL's (SQLite has no server to end a connection)")
    if not connection.health_check_enabled:
        pytest.skip("this database's settings have CONN_HEALTH_CHECKS off")
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    connection.health_check_done = False  # as close_if_unusable_or_obsolete leaves it
    _health_checked_by_its_socket(connection)
    assert connection.health_check_done, "sound: no SELECT 1 to come"
    assert connection.connection is not None, "sound: kept"

    params = connection.get_connection_params()
    with psycopg.connect(**{k: v for k, v in params.items() if k != "cursor_factory"}, autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s)", [pid])
    connection.health_check_done = False

    def closed() -> bool:
        _health_checked_by_its_socket(connection)
        connection.health_check_done = False
        return connection.connection is None

    wait_until(closed, 10, what="the ended connection closed before any query used it")
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        assert cursor.fetchone()[0] != pid, "the next query opened a new one"
