"""Helpers of the audit log's own tests: changing the chain behind the application's back."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection

from rewind.models import AuditChainHead, AuditEvent
from tests.fixtures import audit_guards_lifted_run


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
