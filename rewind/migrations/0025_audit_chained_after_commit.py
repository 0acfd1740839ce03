"""Audit events are written unchained and chained after commit, many at a time.

Appends held the chain head's lock until their transaction committed, so every append in every
process waited for the one before it to reach the disk: about 400 appends/s whatever the
number of writers. Now an event is inserted with ``seq``, ``prev_hash`` and ``hash`` empty in the
caller's transaction, and a chainer sets them once, for every committed event waiting
(``rewind.audit.chain_pending``). The triggers change to match, on both databases:
- events still refuse DELETE (and TRUNCATE: 0024), and any UPDATE of a chained event;
- an unchained event takes exactly one UPDATE: the one that sets its three chain fields, all
  of them, changing nothing else.
On SQLite, making the columns nullable rebuilds the events table, which drops its triggers and
leaves the head's trigger naming a table that is being replaced: all of them are dropped first
and created again afterwards.
"""

from __future__ import annotations

import importlib

from django.db import migrations, models

_sealed = importlib.import_module("rewind.migrations.0024_audit_sealed")
_first = importlib.import_module("rewind.migrations.0002_audit_append_only")

# Every content column: an UPDATE that chains an event must leave each of them as it was.
CONTENT = (
    "id",
    "time",
    "actor_type",
    "actor",
    "action",
    "target_type",
    "target_id",
    "target_repr",
    "data",
    "request_id",
)

SQLITE_CHAIN_ONCE = f"""CREATE TRIGGER rewind_auditevent_chain_once BEFORE UPDATE ON rewind_auditevent
   WHEN OLD.seq IS NOT NULL OR OLD.prev_hash IS NOT NULL OR OLD.hash IS NOT NULL
     OR NEW.seq IS NULL OR NEW.prev_hash IS NULL OR NEW.hash IS NULL
     OR {" OR ".join(f"NEW.{c} IS NOT OLD.{c}" for c in CONTENT)}
   BEGIN SELECT RAISE(ABORT, 'audit events are append-only: only an unchained event may be chained, once'); END"""

SQLITE_ALL = [
    "rewind_auditevent_no_update",
    "rewind_auditevent_chain_once",
    "rewind_auditevent_no_delete",
    "rewind_auditchainhead_no_delete",
    "rewind_auditchainhead_forward",
]
SQLITE_BEFORE = [f"DROP TRIGGER IF EXISTS {name}" for name in SQLITE_ALL]
SQLITE_UP = [SQLITE_CHAIN_ONCE, *_sealed.SQLITE_UP]
SQLITE_DOWN = [_first.SQLITE_UP[0], *_sealed.SQLITE_UP]

POSTGRES_UP = [
    f"""CREATE OR REPLACE FUNCTION rewind_auditevent_guard() RETURNS trigger AS $$
       BEGIN
         IF TG_OP = 'DELETE' THEN
           RAISE EXCEPTION 'audit events are append-only';
         END IF;
         IF OLD.seq IS NOT NULL OR OLD.prev_hash IS NOT NULL OR OLD.hash IS NOT NULL
            OR NEW.seq IS NULL OR NEW.prev_hash IS NULL OR NEW.hash IS NULL
            OR {" OR ".join(f"NEW.{c} IS DISTINCT FROM OLD.{c}" for c in CONTENT)} THEN
           RAISE EXCEPTION 'audit events are append-only: only an unchained event may be chained, once';
         END IF;
         RETURN NEW;
       END; $$ LANGUAGE plpgsql""",
    "DROP TRIGGER IF EXISTS rewind_auditevent_no_change ON rewind_auditevent",
    """CREATE TRIGGER rewind_auditevent_chain_once BEFORE UPDATE OR DELETE ON rewind_auditevent
       FOR EACH ROW EXECUTE FUNCTION rewind_auditevent_guard()""",
]
POSTGRES_DOWN = [
    "DROP TRIGGER IF EXISTS rewind_auditevent_chain_once ON rewind_auditevent",
    "DROP FUNCTION IF EXISTS rewind_auditevent_guard()",
    _first.POSTGRES_UP[1],
]


def _run(statements_by_vendor):  # type: ignore[no-untyped-def]
    def run(apps, schema_editor):  # type: ignore[no-untyped-def]
        for statement in statements_by_vendor.get(schema_editor.connection.vendor, []):
            schema_editor.execute(statement)

    return run


class Migration(migrations.Migration):
    dependencies = [("rewind", "0024_audit_sealed")]

    operations = [
        migrations.RunPython(_run({"sqlite": SQLITE_BEFORE}), _run({"sqlite": SQLITE_DOWN})),
        migrations.AlterModelOptions(name="auditevent", options={"ordering": ["-id"]}),
        migrations.AlterField(
            model_name="auditevent",
            name="hash",
            field=models.CharField(blank=True, max_length=64, null=True, unique=True),
        ),
        migrations.AlterField(
            model_name="auditevent",
            name="prev_hash",
            field=models.CharField(blank=True, max_length=64, null=True),
        ),
        migrations.AlterField(
            model_name="auditevent",
            name="seq",
            field=models.PositiveBigIntegerField(
                blank=True,
                help_text="Position in the chain: 1, 2, 3, ...; empty until chained",
                null=True,
                unique=True,
            ),
        ),
        migrations.RunPython(
            _run({"sqlite": SQLITE_UP, "postgresql": POSTGRES_UP}),
            _run({"sqlite": SQLITE_BEFORE, "postgresql": POSTGRES_DOWN}),
        ),
    ]
