"""rewind.lib.bulk: update_rows writes what each row holds in memory, as save() would, in one statement;
insert_row and model_from_row write and read one row as the ORM does."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, models
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from catalog.models import MutatingTool
from rewind.gateway.models import GatewayCall, Upstream, UpstreamTool
from rewind.lib.bulk import column_count, columns, insert_row, model_from_row, table, update_rows
from rewind.models import TaggedCheckpoint
from tests.helpers import guard_row

pytestmark = pytest.mark.django_db


def test_each_row_gets_its_own_values_of_every_kind_and_other_rows_and_columns_keep_theirs() -> None:
    guards = [guard_row(vm=f"vm{n}", change_id=f"c{n}") for n in range(3)]
    rows = [TaggedCheckpoint.objects.create(guard=g, vpg_identifier=f"vpg-{g.pk}", vpg_name="v") for g in guards]
    when = timezone.now() + timedelta(hours=1)
    rows[0].status, rows[0].next_poll_at, rows[0].waited_ms, rows[0].error = "listed", when, 1234, "é ✓"
    rows[1].status, rows[1].next_poll_at, rows[1].waited_ms, rows[1].error = "failed", None, None, ""
    with CaptureQueriesContext(connection) as queries:
        update_rows(rows[:2], ["status", "next_poll_at", "waited_ms", "error"])
    assert len(queries) == 1  # one statement, executed for each row
    got = {r.pk: r for r in TaggedCheckpoint.objects.all()}
    assert (got[rows[0].pk].status, got[rows[0].pk].next_poll_at, got[rows[0].pk].waited_ms) == ("listed", when, 1234)
    assert got[rows[0].pk].error == "é ✓"
    assert (got[rows[1].pk].status, got[rows[1].pk].next_poll_at, got[rows[1].pk].waited_ms) == ("failed", None, None)
    assert got[rows[2].pk].status == TaggedCheckpoint.Status.PENDING  # not given: untouched
    assert got[rows[0].pk].vpg_identifier == rows[0].vpg_identifier  # not named: untouched


def test_a_field_that_is_no_column_is_refused() -> None:
    guard = guard_row(vm="vm9", change_id="c9")
    with pytest.raises(ValueError, match="is not a column"):
        update_rows([guard], ["vpgs"])
    update_rows([], ["status"])  # nothing to write: nothing asked of the database


# -- one row in plain SQL: what the gateway's hot path reads and writes --------------------------


def _fields(obj: models.Model) -> dict[str, Any]:
    return {f.attname: getattr(obj, f.attname) for f in type(obj)._meta.concrete_fields}


def _read_back(model: type[models.Model], pk: Any) -> models.Model:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {columns(model)} FROM {table(model)} WHERE id = %s", [pk])
        row = cursor.fetchone()
    assert len(row) == column_count(model)
    return model_from_row(model, row)


def test_a_row_inserted_in_plain_sql_reads_back_as_the_orm_reads_it() -> None:
    guard = guard_row(vm="vm1", change_id="c1")
    upstream = Upstream.objects.create(name="up", url="http://u/mcp", command=["x", "é"], call_timeout_s=2.5)
    call = GatewayCall(
        call_id="gwc_1",
        agent_name="fixer",
        agent_id=None,
        upstream=upstream,
        upstream_name="up",
        tool="exec",
        exposed_name="up__exec",
        arguments={"host": "web1", "n": [1, 2.5, None], "deep": {"é": True}},
        decision=GatewayCall.Decision.PASSED,
        guard=guard,
        forwarded_at=timezone.now(),
    )
    with CaptureQueriesContext(connection) as queries:
        insert_row(call)
    assert len(queries) == 1
    assert call.pk is not None
    assert call.received_at is not None
    orm = GatewayCall.objects.get(pk=call.pk)
    assert _fields(orm) == _fields(call)
    assert _fields(_read_back(GatewayCall, call.pk)) == _fields(orm)
    assert _fields(_read_back(Upstream, upstream.pk)) == _fields(Upstream.objects.get(pk=upstream.pk))
    second = GatewayCall(call_id="gwc_2", agent_name="a", upstream=None, upstream_name="", tool="t", exposed_name="e")
    insert_row(second)
    assert second.pk != call.pk
    assert _fields(_read_back(GatewayCall, second.pk)) == _fields(GatewayCall.objects.get(pk=second.pk))


def test_every_field_kind_of_the_tool_and_catalog_rows_reads_back_as_the_orm_reads_it() -> None:
    upstream = Upstream.objects.create(name="up", url="http://u/mcp", enabled=False, tools_listed_at=timezone.now())
    tool = UpstreamTool.objects.create(
        upstream=upstream,
        name="exec",
        exposed_name="up__exec",
        input_schema={"type": "object", "properties": {"host": {"type": "string"}}},
        output_schema=None,
        annotations={"readOnlyHint": True},
        policy="hold",
        last_listed_at=timezone.now(),
    )
    entry = MutatingTool.objects.create(pattern="up/*", vm_arg="host", description="d", added_by="p", platform="linux")
    for model, pk in ((UpstreamTool, tool.pk), (Upstream, upstream.pk), (MutatingTool, entry.pk)):
        read = _read_back(model, pk)
        assert type(read) is model
        assert not read._state.adding
        assert _fields(read) == _fields(model.objects.get(pk=pk))


def test_an_aggregate_read_in_plain_sql_converts_as_the_orm_converts_its_column() -> None:
    from django.db.models import Min

    from rewind.lib.bulk import column, value_from_db

    guard = guard_row(vm="vm7", change_id="c7")
    earliest = timezone.now() + timedelta(minutes=3)
    for n, at in enumerate((earliest + timedelta(seconds=1), earliest, None)):
        TaggedCheckpoint.objects.create(guard=guard, vpg_identifier=f"vpg-{n}", vpg_name="v", next_poll_at=at)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT MIN({column(TaggedCheckpoint, 'next_poll_at')}) FROM {table(TaggedCheckpoint)}")
        raw = cursor.fetchone()[0]
    got = value_from_db(TaggedCheckpoint, "next_poll_at", raw)
    assert got == earliest == TaggedCheckpoint.objects.aggregate(at=Min("next_poll_at"))["at"]
    assert got.tzinfo is not None  # aware, as the ORM reads it (SQLite hands back text)
    assert value_from_db(TaggedCheckpoint, "next_poll_at", None) is None
