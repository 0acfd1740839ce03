"""What the framework gives tools (rewind/mcp/context.py): database retries, and errors that name the call's records."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import OperationalError
from mcp.server.mcpserver.exceptions import ToolError

from rewind.mcp.context import call_refers_to, call_refs, database_retried, refs_sentence
from rewind.mcp.server import _naming_refs


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
