"""The chain's head row remembers the newest event published in an anchor.

An anchor file deleted or cut back verified OK ("no anchor published yet"): nothing in the
database said that anchors had ever been published. Now the publisher records the newest
anchored event in the head row (``anchored_seq``), which, like ``last_seq``, only moves forward:
the head's UPDATE trigger refuses setting it back or clearing it, and a new head starts without.
"""

from __future__ import annotations

import importlib

from django.db import migrations, models

_sealed = importlib.import_module("rewind.migrations.0024_audit_sealed")
_checked = importlib.import_module("rewind.migrations.0029_audit_inserts_checked")

GENESIS, EVENTS, HEAD = _checked.GENESIS, _checked.EVENTS, _checked.HEAD
ANCHORED_BACK = "NEW.anchored_seq IS NULL OR NEW.anchored_seq < OLD.anchored_seq"

SQLITE_UP = [
    "DROP TRIGGER IF EXISTS rewind_auditchainhead_forward",
    f"""CREATE TRIGGER rewind_auditchainhead_forward BEFORE UPDATE ON {HEAD}
       WHEN NEW.last_seq < OLD.last_seq OR NEW.id != OLD.id OR NOT EXISTS (
           SELECT 1 FROM {EVENTS} WHERE seq = NEW.last_seq AND hash = NEW.last_hash)
         OR (OLD.anchored_seq IS NOT NULL AND ({ANCHORED_BACK}))
       BEGIN SELECT RAISE(ABORT, 'the audit chain head only moves forward, onto an existing event'); END""",
    "DROP TRIGGER IF EXISTS rewind_auditchainhead_one",
    f"""CREATE TRIGGER rewind_auditchainhead_one BEFORE INSERT ON {HEAD}
       WHEN NEW.id IS NOT 1 OR NEW.last_seq != 0 OR NEW.last_hash != '{GENESIS}' OR NEW.anchored_seq IS NOT NULL
         OR EXISTS (SELECT 1 FROM {HEAD})
       BEGIN SELECT RAISE(ABORT, 'the audit chain has one head row, created empty'); END""",
]
SQLITE_DOWN = [
    "DROP TRIGGER IF EXISTS rewind_auditchainhead_forward",
    _sealed.SQLITE_UP[2],
    "DROP TRIGGER IF EXISTS rewind_auditchainhead_one",
    _checked.SQLITE_ONE_HEAD,
]

POSTGRES_UP = [
    f"""CREATE OR REPLACE FUNCTION rewind_auditchainhead_guard() RETURNS trigger AS $$
       BEGIN
         IF TG_OP = 'DELETE' THEN
           RAISE EXCEPTION 'the audit chain head cannot be removed';
         END IF;
         IF NEW.last_seq < OLD.last_seq OR NEW.id <> OLD.id OR NOT EXISTS (
             SELECT 1 FROM {EVENTS} WHERE seq = NEW.last_seq AND hash = NEW.last_hash)
            OR (OLD.anchored_seq IS NOT NULL AND ({ANCHORED_BACK})) THEN
           RAISE EXCEPTION 'the audit chain head only moves forward, onto an existing event';
         END IF;
         RETURN NEW;
       END; $$ LANGUAGE plpgsql""",
    f"""CREATE OR REPLACE FUNCTION rewind_auditchainhead_one() RETURNS trigger AS $$
       BEGIN
         IF NEW.id <> 1 OR NEW.last_seq <> 0 OR NEW.last_hash <> '{GENESIS}' OR NEW.anchored_seq IS NOT NULL
            OR EXISTS (SELECT 1 FROM {HEAD}) THEN
           RAISE EXCEPTION 'the audit chain has one head row, created empty';
         END IF;
         RETURN NEW;
       END; $$ LANGUAGE plpgsql""",
]
POSTGRES_DOWN = [_sealed.POSTGRES_UP[3], _checked.POSTGRES_UP[4]]


def _run(statements_by_vendor):  # type: ignore[no-untyped-def]
    def run(apps, schema_editor):  # type: ignore[no-untyped-def]
        for statement in statements_by_vendor.get(schema_editor.connection.vendor, []):
            schema_editor.execute(statement)

    return run


class Migration(migrations.Migration):
    dependencies = [("rewind", "0029_audit_inserts_checked")]

    operations = [
        migrations.AddField(
            model_name="auditchainhead",
            name="anchored_seq",
            field=models.PositiveBigIntegerField(
                blank=True, help_text="The newest event published in an anchor; empty until the first", null=True
            ),
        ),
        migrations.RunPython(
            _run({"sqlite": SQLITE_UP, "postgresql": POSTGRES_UP}),
            _run({"sqlite": SQLITE_DOWN, "postgresql": POSTGRES_DOWN}),
        ),
    ]
