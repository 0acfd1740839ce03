"""Helpers of the audit log's own tests: changing the chain behind the application's back."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from django.db import connection

from rewind.audit import compute_hash
from rewind.models import AuditChainHead, AuditEvent
from tests.fixtures import audit_guards_lifted_run

FORGED = "f" * 64  # a hash no event has
_COLUMNS = "time, actor_type, actor, action, target_type, target_id, target_repr, data, request_id"


def event_insert_sql(*, chained: bool) -> str:
    """An INSERT of one event: its content, and its three chain fields when ``chained``."""
    table = connection.ops.quote_name(AuditEvent._meta.db_table)
    chain = ", seq, prev_hash, hash" if chained else ""
    values = ", ".join(["%s"] * (9 + (3 if chained else 0)))
    return f"INSERT INTO {table} ({_COLUMNS}{chain}) VALUES ({values})"


def event_content() -> list[Any]:
    """The content of an event someone writes into the table: the newest event's time, made-up data."""
    newest = AuditEvent.objects.order_by("-id").first()
    assert newest is not None
    return [newest.time, "agent", "bot", "forged.event", "", "", "", '{"forged": true}', ""]


def raw_forge(*, seq: int, prev: str) -> None:
    """As someone who dropped the triggers would: a chained row no chainer wrote, with a made-up hash."""
    audit_guards_lifted_run([(event_insert_sql(chained=True), [*event_content(), seq, prev, FORGED])])


def raw_rewrite_from(events: Sequence[AuditEvent], first: int) -> str:
    """Rewrite ``events[first:]`` with their links recomputed, so the chain still links; the new last hash."""
    prev, statements = events[first - 1].hash or "", []
    table = connection.ops.quote_name(AuditEvent._meta.db_table)
    for event in events[first:]:
        data = {"i": -1}
        new = compute_hash(
            seq=event.seq or 0, time=event.time, actor_type=event.actor_type, actor=event.actor, action=event.action,
            target_type=event.target_type, target_id=event.target_id, target_repr=event.target_repr, data=data,
            request_id=event.request_id, prev_hash=prev,
        )  # fmt: skip
        statements.append(
            (
                f"UPDATE {table} SET data = %s, prev_hash = %s, hash = %s WHERE id = %s",
                [json.dumps(data), prev, new, event.pk],
            )
        )
        prev = new
    audit_guards_lifted_run(statements)
    return prev


def raw_update(event: AuditEvent, column: str, sql_value: str) -> None:
    """Change a row behind the application's back, as someone with database access could."""
    table = connection.ops.quote_name(AuditEvent._meta.db_table)
    audit_guards_lifted_run([(f"UPDATE {table} SET {column} = {sql_value} WHERE id = %s", [event.pk])])


def raw_delete(*events: AuditEvent) -> None:
    table = connection.ops.quote_name(AuditEvent._meta.db_table)
    audit_guards_lifted_run([(f"DELETE FROM {table} WHERE id = %s", [e.pk]) for e in events])


def raw_set_head(seq: int, last_hash: str | None) -> None:
    """Set the chain head back, as someone would who cut the chain and wanted it to verify."""
    table = connection.ops.quote_name(AuditChainHead._meta.db_table)
    audit_guards_lifted_run([(f"UPDATE {table} SET last_seq = %s, last_hash = %s WHERE id = 1", [seq, last_hash])])


def raw_empty() -> None:
    """Empty the whole log and reset its head, as a TRUNCATE by someone who may lift the guards would."""
    events = connection.ops.quote_name(AuditEvent._meta.db_table)
    head = connection.ops.quote_name(AuditChainHead._meta.db_table)
    audit_guards_lifted_run(
        [(f"DELETE FROM {events}", []), (f"UPDATE {head} SET last_seq = 0, last_hash = %s", ["0" * 64])]
    )


@contextmanager
def audit_inserts_refused() -> Iterator[None]:
    """The database refuses every new audit event while this lasts (a full disk, a revoked grant)."""
    table = connection.ops.quote_name(AuditEvent._meta.db_table)
    if connection.vendor == "postgresql":
        create = [
            "CREATE FUNCTION test_refuse_audit() RETURNS trigger AS $$ "
            "BEGIN RAISE EXCEPTION 'refused for the test'; END; $$ LANGUAGE plpgsql",
            f"CREATE TRIGGER test_refuse_audit BEFORE INSERT ON {table} FOR EACH ROW EXECUTE FUNCTION test_refuse_audit()",
        ]
        drop = [f"DROP TRIGGER test_refuse_audit ON {table}", "DROP FUNCTION test_refuse_audit()"]
    else:
        create = [
            f"CREATE TRIGGER test_refuse_audit BEFORE INSERT ON {table} BEGIN SELECT RAISE(ABORT, 'refused'); END"
        ]
        drop = ["DROP TRIGGER test_refuse_audit"]
    with connection.cursor() as cursor:
        for sql in create:
            cursor.execute(sql)
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            for sql in drop:
                cursor.execute(sql)
