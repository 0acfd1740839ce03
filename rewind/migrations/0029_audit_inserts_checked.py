"""The database checks what goes into the audit chain, inserts included, and keeps one head row.

Until now the triggers refused DELETE and UPDATE of events, but an INSERT of a row that arrived
already chained (the next ``seq``, any hash) was accepted, and from then on every chainer
collided with it (``seq`` is unique): no audited write succeeded. Now, on both databases:
- a chained event extends the chain by exactly one: its ``seq`` lies past the head row and the
  event before it (or the head, for the first past it) has exactly its ``prev_hash``;
- PostgreSQL takes events unchained only (its chainer links them by UPDATE, checked as above
  once the statement has linked its whole batch); SQLite, whose single writer inserts its own
  events chained, takes an event unchained or chained by that rule, and its chainer links a
  waiting event one statement at a time so that each is checked after the one before it;
- the head table holds one row, the head (id 1), and takes a new one only empty, at the start.
The hash itself is not recomputed here (its canonical JSON is the application's): a link with
the right ``prev_hash`` and a wrong hash gets in, and ``manage.py audit_verify`` names it. The
chainers go on after whatever lies past the head (``rewind.audit.chaining``), so even a row
written with the triggers dropped stops nothing.
"""

from __future__ import annotations

import importlib

from django.db import migrations, models

_chained_after_commit = importlib.import_module("rewind.migrations.0025_audit_chained_after_commit")

GENESIS = "0" * 64
EVENTS, HEAD = "rewind_auditevent", "rewind_auditchainhead"
LINK_REFUSED = (
    "audit events are chained by extending the chain by one, after its head, with the hash before as prev_hash"
)

CONTENT = _chained_after_commit.CONTENT  # what an UPDATE that chains an event must leave as it was


def _sqlite_links(new: str) -> str:
    """SQLite: the condition under which the row ``new`` does not extend the chain by one."""
    head_seq = f"COALESCE((SELECT last_seq FROM {HEAD} WHERE id = 1), 0)"
    before = (
        f"CASE WHEN {new}.seq - 1 = {head_seq} "
        f"THEN COALESCE((SELECT last_hash FROM {HEAD} WHERE id = 1), '{GENESIS}') "
        f"ELSE (SELECT hash FROM {EVENTS} WHERE seq = {new}.seq - 1) END"
    )
    return f"{new}.seq <= {head_seq} OR {new}.prev_hash IS NOT ({before})"


SQLITE_CHAIN_ONCE = f"""CREATE TRIGGER rewind_auditevent_chain_once BEFORE UPDATE ON {EVENTS}
   WHEN OLD.seq IS NOT NULL OR OLD.prev_hash IS NOT NULL OR OLD.hash IS NOT NULL
     OR NEW.seq IS NULL OR NEW.prev_hash IS NULL OR NEW.hash IS NULL
     OR {" OR ".join(f"NEW.{c} IS NOT OLD.{c}" for c in CONTENT)}
     OR {_sqlite_links("NEW")}
   BEGIN SELECT RAISE(ABORT, 'audit events are append-only: only an unchained event may be chained, once, \
as the next link of the chain'); END"""
SQLITE_INSERT = f"""CREATE TRIGGER rewind_auditevent_insert BEFORE INSERT ON {EVENTS}
   WHEN (NEW.seq IS NOT NULL OR NEW.prev_hash IS NOT NULL OR NEW.hash IS NOT NULL)
     AND (NEW.seq IS NULL OR NEW.prev_hash IS NULL OR NEW.hash IS NULL OR {_sqlite_links("NEW")})
   BEGIN SELECT RAISE(ABORT, 'an audit event goes in unchained, or as the next link of the chain: {LINK_REFUSED}'); END"""
SQLITE_ONE_HEAD = f"""CREATE TRIGGER rewind_auditchainhead_one BEFORE INSERT ON {HEAD}
   WHEN NEW.id IS NOT 1 OR NEW.last_seq != 0 OR NEW.last_hash != '{GENESIS}' OR EXISTS (SELECT 1 FROM {HEAD})
   BEGIN SELECT RAISE(ABORT, 'the audit chain has one head row, created empty'); END"""
SQLITE_UP = ["DROP TRIGGER IF EXISTS rewind_auditevent_chain_once", SQLITE_CHAIN_ONCE, SQLITE_INSERT, SQLITE_ONE_HEAD]
SQLITE_DOWN = [
    "DROP TRIGGER IF EXISTS rewind_auditchainhead_one",
    "DROP TRIGGER IF EXISTS rewind_auditevent_insert",
    "DROP TRIGGER IF EXISTS rewind_auditevent_chain_once",
    _chained_after_commit.SQLITE_CHAIN_ONCE,
]

POSTGRES_UP = [
    """CREATE OR REPLACE FUNCTION rewind_auditevent_refuse_chained_insert() RETURNS trigger AS $$
       BEGIN
         RAISE EXCEPTION 'an audit event goes in unchained (seq, prev_hash and hash empty): the chainer links it';
       END; $$ LANGUAGE plpgsql""",
    f"""CREATE TRIGGER rewind_auditevent_insert BEFORE INSERT ON {EVENTS} FOR EACH ROW
       WHEN (NEW.seq IS NOT NULL OR NEW.prev_hash IS NOT NULL OR NEW.hash IS NOT NULL)
       EXECUTE FUNCTION rewind_auditevent_refuse_chained_insert()""",
    # Once the statement has linked its whole batch (in whatever order it updated the rows),
    # each event it linked must lie past the head and follow the event before it.
    f"""CREATE OR REPLACE FUNCTION rewind_auditevent_links_follow() RETURNS trigger AS $$
       DECLARE
         head_seq bigint;
         head_hash text;
       BEGIN
         SELECT h.last_seq, h.last_hash INTO head_seq, head_hash FROM {HEAD} h WHERE h.id = 1;
         head_seq := COALESCE(head_seq, 0);
         head_hash := COALESCE(head_hash, '{GENESIS}');
         IF EXISTS (
             SELECT 1 FROM linked l
             WHERE l.seq IS NOT NULL AND (
               l.seq <= head_seq OR l.prev_hash IS DISTINCT FROM (
                 CASE WHEN l.seq - 1 = head_seq THEN head_hash
                 ELSE (SELECT e.hash FROM {EVENTS} e WHERE e.seq = l.seq - 1) END))) THEN
           RAISE EXCEPTION '{LINK_REFUSED}';
         END IF;
         RETURN NULL;
       END; $$ LANGUAGE plpgsql""",
    f"""CREATE TRIGGER rewind_auditevent_links_follow AFTER UPDATE ON {EVENTS}
       REFERENCING NEW TABLE AS linked FOR EACH STATEMENT EXECUTE FUNCTION rewind_auditevent_links_follow()""",
    f"""CREATE OR REPLACE FUNCTION rewind_auditchainhead_one() RETURNS trigger AS $$
       BEGIN
         IF NEW.id <> 1 OR NEW.last_seq <> 0 OR NEW.last_hash <> '{GENESIS}' OR EXISTS (SELECT 1 FROM {HEAD}) THEN
           RAISE EXCEPTION 'the audit chain has one head row, created empty';
         END IF;
         RETURN NEW;
       END; $$ LANGUAGE plpgsql""",
    f"""CREATE TRIGGER rewind_auditchainhead_one BEFORE INSERT ON {HEAD}
       FOR EACH ROW EXECUTE FUNCTION rewind_auditchainhead_one()""",
]
POSTGRES_DOWN = [
    f"DROP TRIGGER IF EXISTS rewind_auditchainhead_one ON {HEAD}",
    "DROP FUNCTION IF EXISTS rewind_auditchainhead_one()",
    f"DROP TRIGGER IF EXISTS rewind_auditevent_links_follow ON {EVENTS}",
    "DROP FUNCTION IF EXISTS rewind_auditevent_links_follow()",
    f"DROP TRIGGER IF EXISTS rewind_auditevent_insert ON {EVENTS}",
    "DROP FUNCTION IF EXISTS rewind_auditevent_refuse_chained_insert()",
]


def _run(statements_by_vendor):  # type: ignore[no-untyped-def]
    def run(apps, schema_editor):  # type: ignore[no-untyped-def]
        for statement in statements_by_vendor.get(schema_editor.connection.vendor, []):
            schema_editor.execute(statement)

    return run


class Migration(migrations.Migration):
    dependencies = [("rewind", "0028_mcpratecount_calls")]

    operations = [
        migrations.RunPython(
            _run({"sqlite": SQLITE_UP, "postgresql": POSTGRES_UP}),
            _run({"sqlite": SQLITE_DOWN, "postgresql": POSTGRES_DOWN}),
        ),
        # A failed check of the chain is told to the notification channels (rewind.notifications.audit_chain).
        migrations.AlterField(
            model_name="notificationdelivery",
            name="kind",
            field=models.CharField(
                choices=[
                    ("recovery.awaits_approval", "a recovery awaits approval"),
                    ("recovery.expires_soon", "a pending recovery expires soon"),
                    ("flr.unmount_failed", "a mount of ours could not be unmounted"),
                    ("guard.failed", "a guard failed or timed out"),
                    ("site.down", "a site is unreachable"),
                    ("checkpoint.leaving_journal", "a guard's checkpoint is about to leave the journal"),
                    ("recovery.awaits_write_back", "a restore in place awaits its write-back click"),
                    ("recovery.restored", "a file was written back into a guest and verified"),
                    ("recovery.not_restored", "a file was not (fully) written back into a guest"),
                    ("audit.chain_broken", "the audit chain failed a verification"),
                    ("test", "a test notification"),
                ],
                db_index=True,
                max_length=40,
            ),
        ),
    ]
