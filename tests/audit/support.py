"""Helpers of the audit log's own tests."""

from __future__ import annotations

import importlib

from django.db import connection

from rewind.models import AuditEvent

append_only = importlib.import_module("rewind.migrations.0002_audit_append_only")


def raw_update(event: AuditEvent, column: str, sql_value: str) -> None:
    """Change a row behind the application's back, as someone with database access could."""
    table = AuditEvent._meta.db_table
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(f"ALTER TABLE {table} DISABLE TRIGGER USER")
            cursor.execute(f"UPDATE {table} SET {column} = {sql_value} WHERE id = %s", [event.pk])
            cursor.execute(f"ALTER TABLE {table} ENABLE TRIGGER USER")
        else:
            cursor.execute("DROP TRIGGER rewind_auditevent_no_update")
            cursor.execute(f"UPDATE {table} SET {column} = {sql_value} WHERE id = %s", [event.pk])
            cursor.execute(append_only.SQLITE_UP[0])
