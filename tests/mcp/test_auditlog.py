"""The batching writer of tool-call audit rows keeps the hash chain that audit_verify checks."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from rewind.audit import Actor, audit_record, verify_chain
from rewind.mcp.auditlog import _append_committed, _Pending, audit_writer
from rewind.models import AuditEvent
from tests.helpers import run


@pytest.fixture(autouse=True)
def _writer_lets_go_of_the_database() -> Any:
    yield
    audit_writer.close_connections()  # else PostgreSQL cannot drop the test database at the end


def _pending(i: int) -> _Pending:
    loop = asyncio.new_event_loop()
    return _Pending(
        Actor.agent("bot"),
        "mcp.tool.called",
        ("mcp.tool", "t"),
        {"tool": "t", "arguments": {"n": i, "password": "hunter2"}},
        f"req-{i:08d}",
        loop,
        loop.create_future(),
    )


def test_a_batch_continues_the_chain_in_order(db: None) -> None:
    audit_record(actor=Actor.system(), action="before.batch")
    _append_committed([_pending(i) for i in range(5)], lambda: None)
    audit_record(actor=Actor.system(), action="after.batch")
    checked, problem = verify_chain()
    assert (checked, problem) == (7, None)
    rows = list(AuditEvent.objects.order_by("seq"))
    assert [r.action for r in rows] == ["before.batch"] + ["mcp.tool.called"] * 5 + ["after.batch"]
    assert [r.data["arguments"]["n"] for r in rows[1:6]] == [0, 1, 2, 3, 4]
    assert all(r.data["arguments"]["password"] == "***" for r in rows[1:6])
    assert rows[3].request_id == "req-00000002"
    assert rows[3].actor == "bot"


@pytest.mark.django_db(transaction=True)
def test_callers_are_told_once_their_rows_commit_not_after_chaining_what_others_wrote(monkeypatch: Any) -> None:
    from django.db import connection

    import rewind.audit

    if connection.vendor != "postgresql":
        pytest.skip("SQLite runs one write transaction at a time: an append chains its own rows before it commits")
    order: list[str] = []
    chain_pending = rewind.audit.chain_pending

    def chaining() -> int:
        order.append("chaining")
        return chain_pending()

    monkeypatch.setattr(rewind.audit, "chain_pending", chaining)
    _append_committed([_pending(i) for i in range(3)], lambda: order.append("told"))
    assert order == ["told", "chaining"]
    assert AuditEvent.objects.filter(action="mcp.tool.called").count() == 3
    assert verify_chain() == (3, None)


def test_the_writer_returns_once_every_row_is_committed(transactional_db: None) -> None:
    async def many() -> None:
        await asyncio.gather(
            *(
                audit_writer.record(
                    actor=Actor.agent("bot"),
                    action="mcp.tool.called",
                    target=("mcp.tool", "t"),
                    data={"n": i},
                    request_id=f"req-{i:08d}",
                )
                for i in range(30)
            )
        )

    run(many())
    assert AuditEvent.objects.filter(action="mcp.tool.called").count() == 30
    assert verify_chain()[1] is None


def test_bad_rows_fail_alone(transactional_db: None) -> None:
    class Unserializable:
        def __str__(self) -> str:
            raise ValueError("no text")

    async def mixed() -> list[Any]:
        calls = [
            audit_writer.record(
                actor=Actor.agent("bot"),
                action="mcp.tool.called",
                target=("mcp.tool", "t"),
                data={"n": i, "bad": Unserializable() if i == 3 else 0},
                request_id=f"req-{i:08d}",
            )
            for i in range(6)
        ]
        return await asyncio.gather(*calls, return_exceptions=True)

    outcomes = run(mixed())
    assert [isinstance(o, Exception) for o in outcomes] == [False, False, False, True, False, False]
    assert AuditEvent.objects.count() == 5
    assert verify_chain()[1] is None


def test_huge_arguments_are_summarized_in_the_call_row() -> None:
    from rewind.mcp.server import AUDITED_ARGUMENTS_MAX_CHARS, _audited_arguments

    small = {"vm": "web01", "token": "rwd_" + "a" * 40}
    assert _audited_arguments(small) == {"vm": "web01", "token": "***"}
    huge = _audited_arguments({"password": "hunter2", "script": "x" * (AUDITED_ARGUMENTS_MAX_CHARS + 1)})
    assert huge["_summarized"] is True
    assert huge["chars"] > AUDITED_ARGUMENTS_MAX_CHARS
    assert len(huge["preview"]) == 2000
    assert '"password": "***"' in huge["preview"]
    assert "hunter2" not in huge["preview"]
