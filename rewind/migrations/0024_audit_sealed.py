"""The audit log can no longer be cut or emptied through the database's data statements.

0002 refused UPDATE of events (and DELETE on PostgreSQL). Still open were: DELETE of events on
SQLite, TRUNCATE on PostgreSQL, and the chain head row, which could be deleted or set back so
that a cut chain verified. Now, on both databases:
- events refuse UPDATE, DELETE and (PostgreSQL) TRUNCATE;
- the head row refuses DELETE and TRUNCATE, and an UPDATE only moves it forward, onto an event
  that exists with exactly that hash.
Someone who may drop triggers can still do all of it: the anchors published outside the
database (rewind/audit/anchors.py) are what catches that.
"""

from __future__ import annotations

from django.db import migrations

SQLITE_UP = [
    """CREATE TRIGGER rewind_auditevent_no_delete BEFORE DELETE ON rewind_auditevent
       BEGIN SELECT RAISE(ABORT, 'audit events are append-only'); END""",
    """CREATE TRIGGER rewind_auditchainhead_no_delete BEFORE DELETE ON rewind_auditchainhead
       BEGIN SELECT RAISE(ABORT, 'the audit chain head cannot be removed'); END""",
    """CREATE TRIGGER rewind_auditchainhead_forward BEFORE UPDATE ON rewind_auditchainhead
       WHEN NEW.last_seq < OLD.last_seq OR NEW.id != OLD.id OR NOT EXISTS (
           SELECT 1 FROM rewind_auditevent WHERE seq = NEW.last_seq AND hash = NEW.last_hash)
       BEGIN SELECT RAISE(ABORT, 'the audit chain head only moves forward, onto an existing event'); END""",
]
SQLITE_DOWN = [
    "DROP TRIGGER IF EXISTS rewind_auditevent_no_delete",
    "DROP TRIGGER IF EXISTS rewind_auditchainhead_no_delete",
    "DROP TRIGGER IF EXISTS rewind_auditchainhead_forward",
]

POSTGRES_UP = [
    """CREATE OR REPLACE FUNCTION rewind_audit_refuse_truncate() RETURNS trigger AS $$
       BEGIN RAISE EXCEPTION 'the audit log cannot be truncated'; END; $$ LANGUAGE plpgsql""",
    """CREATE TRIGGER rewind_auditevent_no_truncate BEFORE TRUNCATE ON rewind_auditevent
       FOR EACH STATEMENT EXECUTE FUNCTION rewind_audit_refuse_truncate()""",
    """CREATE TRIGGER rewind_auditchainhead_no_truncate BEFORE TRUNCATE ON rewind_auditchainhead
       FOR EACH STATEMENT EXECUTE FUNCTION rewind_audit_refuse_truncate()""",
    """CREATE OR REPLACE FUNCTION rewind_auditchainhead_guard() RETURNS trigger AS $$
       BEGIN
         IF TG_OP = 'DELETE' THEN
           RAISE EXCEPTION 'the audit chain head cannot be removed';
         END IF;
         IF NEW.last_seq < OLD.last_seq OR NEW.id <> OLD.id OR NOT EXISTS (
             SELECT 1 FROM rewind_auditevent WHERE seq = NEW.last_seq AND hash = NEW.last_hash) THEN
           RAISE EXCEPTION 'the audit chain head only moves forward, onto an existing event';
         END IF;
         RETURN NEW;
       END; $$ LANGUAGE plpgsql""",
    """CREATE TRIGGER rewind_auditchainhead_guard BEFORE UPDATE OR DELETE ON rewind_auditchainhead
       FOR EACH ROW EXECUTE FUNCTION rewind_auditchainhead_guard()""",
]
POSTGRES_DOWN = [
    "DROP TRIGGER IF EXISTS rewind_auditchainhead_guard ON rewind_auditchainhead",
    "DROP FUNCTION IF EXISTS rewind_auditchainhead_guard()",
    "DROP TRIGGER IF EXISTS rewind_auditchainhead_no_truncate ON rewind_auditchainhead",
    "DROP TRIGGER IF EXISTS rewind_auditevent_no_truncate ON rewind_auditevent",
    "DROP FUNCTION IF EXISTS rewind_audit_refuse_truncate()",
]


def _run(statements_by_vendor):  # type: ignore[no-untyped-def]
    def run(apps, schema_editor):  # type: ignore[no-untyped-def]
        for statement in statements_by_vendor.get(schema_editor.connection.vendor, []):
            schema_editor.execute(statement)

    return run


class Migration(migrations.Migration):
    dependencies = [("rewind", "0023_mcp_rate_window")]

    operations = [
        migrations.RunPython(
            _run({"sqlite": SQLITE_UP, "postgresql": POSTGRES_UP}),
            _run({"sqlite": SQLITE_DOWN, "postgresql": POSTGRES_DOWN}),
        ),
    ]
