"""Make the audit log append-only in the database and create the chain's head row."""

from __future__ import annotations

from django.db import migrations

SQLITE_UP = [
    """CREATE TRIGGER rewind_auditevent_no_update BEFORE UPDATE ON rewind_auditevent
       BEGIN SELECT RAISE(ABORT, 'audit events are append-only'); END""",
]
SQLITE_DOWN = ["DROP TRIGGER IF EXISTS rewind_auditevent_no_update"]

# DELETE is refused too on PostgreSQL. (TRUNCATE, which test flushes use, is a separate
# privilege an operator can revoke from the application role.)
POSTGRES_UP = [
    """CREATE OR REPLACE FUNCTION rewind_auditevent_refuse() RETURNS trigger AS $$
       BEGIN RAISE EXCEPTION 'audit events are append-only'; END; $$ LANGUAGE plpgsql""",
    """CREATE TRIGGER rewind_auditevent_no_change BEFORE UPDATE OR DELETE ON rewind_auditevent
       FOR EACH ROW EXECUTE FUNCTION rewind_auditevent_refuse()""",
]
POSTGRES_DOWN = [
    "DROP TRIGGER IF EXISTS rewind_auditevent_no_change ON rewind_auditevent",
    "DROP FUNCTION IF EXISTS rewind_auditevent_refuse()",
]


def _run(statements_by_vendor: dict[str, list[str]]):  # type: ignore[no-untyped-def]
    def run(apps, schema_editor):  # type: ignore[no-untyped-def]
        for statement in statements_by_vendor.get(schema_editor.connection.vendor, []):
            schema_editor.execute(statement)

    return run


def create_head(apps, schema_editor):  # type: ignore[no-untyped-def]
    apps.get_model("rewind", "AuditChainHead").objects.get_or_create(pk=1)


class Migration(migrations.Migration):
    dependencies = [("rewind", "0001_initial")]

    operations = [
        migrations.RunPython(
            _run({"sqlite": SQLITE_UP, "postgresql": POSTGRES_UP}),
            _run({"sqlite": SQLITE_DOWN, "postgresql": POSTGRES_DOWN}),
        ),
        migrations.RunPython(create_head, migrations.RunPython.noop),
    ]
