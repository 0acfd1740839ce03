"""The audit log's write path: rows go in unchained, a chainer links them many at a time.

Appends used to lock the chain head until they committed, so every append in every process waited for the one
before it to reach the disk (measured: see the benchmarks page). Now ``insert_unchained`` inserts in the
caller's transaction (fail-closed as before) and tries the chain lock (a PostgreSQL advisory lock) without
waiting; whoever holds it links every committed event waiting in one batch, in the order of recording, and
``chain_pending`` runs after each commit. A row someone wrote past the head is chained after, never a reason for
every later append to fail (``audit_verify`` reports it). SQLite runs one writer at a time, so there an append
inserts its events chained (``insert_chained``). Plain SQL in as few round trips as each database allows: every
MCP tool call is audited.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from django.db import IntegrityError, connection, transaction
from django.db.models import Field

from rewind.audit.canonical import compute_hash
from rewind.audit.models import AuditChainHead, AuditEvent

logger = logging.getLogger(__name__)

CHAIN_BATCH = 2000  # events linked per transaction: bounds one chainer's statements and lock time
PAST_BATCH = 500  # events past the head read per statement (normally there are none)
INSERT_ROWS = 500  # rows per INSERT statement: well inside SQLite's limit of 32,766 parameters
# The PostgreSQL advisory lock one chainer holds at a time (an arbitrary constant of our own).
CHAIN_LOCK_KEY = 0x7277_6E64_6175_6474

COLUMNS = ("time", "actor_type", "actor", "action", "target_type", "target_id", "target_repr", "data", "request_id")
CHAINED_COLUMNS = (*COLUMNS, "seq", "prev_hash", "hash")
_WAITING = ("id", *COLUMNS)  # what a chainer reads of a waiting event: its id and what it hashes


class AuditChainError(Exception):
    pass


_past_reported: set[int] = set()  # the events past the head this process has logged already


def insert_unchained(rows: list[dict[str, Any]], *, try_lock: bool = True) -> tuple[list[int], bool]:
    """Insert ``rows`` (``COLUMNS`` each); (their ids in order, whether this transaction got the chain lock).
    ``try_lock=False`` does not try it, so no chainer waits for a transaction that will not chain."""
    sql = _statements()
    ids: list[int] = []
    chain_free = try_lock
    with connection.cursor() as cursor:
        for start in range(0, len(rows), INSERT_ROWS):
            chunk = rows[start : start + INSERT_ROWS]
            cursor.execute(sql.insert_of(len(chunk), try_lock=try_lock), _db_params(chunk))
            found = cursor.fetchall()
            ids += [int(row[0]) for row in found]
            chain_free = try_lock and bool(found[0][1])
    return ids, chain_free


def chain_pending() -> int:
    """Chain every committed event still waiting, in batches, unless another chainer is at work; how many this call
    chained.

    Runs after each append commits, from the beat (for a writer that died in between) and wherever the chain
    must be complete. A chainer that finds the lock taken leaves: the holder looks for waiting events again
    after letting it go, so the last chainer out leaves nothing behind.
    """
    if connection.in_atomic_block:
        # The lock lasts as long as the caller's transaction: one batch, the rest after commit.
        with transaction.atomic(savepoint=False):
            return chain_locked() if _lock_try(for_transaction=True) else 0
    chained = 0
    while _lock_try(for_transaction=False, only_when_waiting=True):
        try:
            with transaction.atomic():
                batch = chain_locked()
        finally:
            _lock_release()
        if not batch:
            break
        chained += batch
    return chained


def chain_locked() -> int:
    """Link up to ``CHAIN_BATCH`` waiting events, oldest recording first; the caller holds the chain lock.

    The head row's lock is a second guard: a chainer that got past the chain lock waits for this one's commit,
    and then the database refuses its links (no fork, only an error). What is hashed is what the database gives
    back, converted as the ORM converts it, so ``verify_chain`` computes the same hash.
    """
    return _link_waiting()[0]


def insert_chained(rows: list[dict[str, Any]]) -> list[int]:
    """Where one write transaction runs at a time (SQLite): link whatever waits, then insert ``rows`` chained after
    it; their ids in order. Their hashes come from the values as given, which ``mask_secrets`` makes what the
    database gives back (``tests/audit/test_canonical_properties.py``)."""
    linked, seq, prev = _link_waiting()
    while linked == CHAIN_BATCH:
        linked, seq, prev = _link_waiting()
    sql = _statements()
    ids: list[int] = []
    with connection.cursor() as cursor:
        for start in range(0, len(rows), INSERT_ROWS):
            chunk = []
            for row in rows[start : start + INSERT_ROWS]:
                seq += 1
                linked_hash = compute_hash(seq=seq, prev_hash=prev, **row)
                chunk.append({**row, "seq": seq, "prev_hash": prev, "hash": linked_hash})
                prev = linked_hash
            cursor.execute(sql.insert_chained_of(len(chunk)), _db_params(chunk, CHAINED_COLUMNS))
            ids += [int(found[0]) for found in cursor.fetchall()]
        cursor.execute(sql.move_head, [seq, prev])
    return ids


def _link_waiting() -> tuple[int, int, str]:
    """``chain_locked``'s work: (events linked, the end of the chain's seq and hash afterwards)."""
    sql = _statements()
    with connection.cursor() as cursor:
        cursor.execute(sql.read_waiting)
        found = cursor.fetchall()
    if not found:
        _create_head()
        return _link_waiting()
    seq, prev = int(found[0][0]), str(found[0][1])
    if found[0][2] is not None:  # a chained event lies past the head: none of ours
        seq, prev = _past_the_head(seq, prev)
    ids: list[int] = []
    seqs: list[int] = []
    prevs: list[str] = []
    hashes: list[str] = []
    for values in found:
        if values[3] is None:  # the head alone: nothing waits
            break
        pk, content = _waiting_event(values[3:])
        seq += 1
        linked = compute_hash(seq=seq, prev_hash=prev, **content)
        ids.append(pk)
        seqs.append(seq)
        prevs.append(prev)
        hashes.append(linked)
        prev = linked
    if ids:
        with connection.cursor() as cursor:
            _execute_together(cursor, [*sql.link(ids, seqs, prevs, hashes), (sql.move_head, [seq, prev])])
    return len(ids), seq, prev


def _past_the_head(seq: int, prev: str) -> tuple[int, str]:
    """The end of the chain when events lie past the head ``seq``: the last of those that follow on from it one by
    one, with its hash. Every chainer moves the head with what it links, so these were written by something
    else: linking after them keeps the next append from colliding; ``audit_verify`` judges them."""
    sql, head, first = _statements(), seq, None
    with connection.cursor() as cursor:
        while True:
            cursor.execute(sql.read_past, [seq])
            rows = cursor.fetchall()
            first = first if first is not None or not rows else int(rows[0][0])
            run = 0
            for found, found_hash in rows:
                if int(found) != seq + 1:
                    break
                seq, prev, run = int(found), str(found_hash), run + 1
            if run < PAST_BATCH:
                break
    if first is not None and first not in _past_reported:
        _past_reported.add(first)
        logger.error(
            "audit events from #%s lie past the chain's head (#%s): no chainer of this service wrote them; "
            "the chain goes on after #%s; run manage.py audit_verify",
            first,
            head,
            seq,
        )
    return seq, prev


def _lock_try(*, for_transaction: bool, only_when_waiting: bool = False) -> bool:
    """Take the chain lock if it is free; with ``only_when_waiting``, only while events wait. PostgreSQL: the
    advisory lock, for the transaction or the session (until ``_lock_release``). SQLite: a writer holds the
    database's lock already, and a chainer's transaction waits for it like any write."""
    sql = _statements()
    if connection.vendor != "postgresql":
        if not only_when_waiting:
            return True
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT 1 WHERE {sql.waiting}")
            return cursor.fetchone() is not None
    function = "pg_try_advisory_xact_lock" if for_transaction else "pg_try_advisory_lock"
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {function}({CHAIN_LOCK_KEY})" + (f" WHERE {sql.waiting}" if only_when_waiting else ""))
        found = cursor.fetchone()
    return bool(found and found[0])


def _lock_release() -> None:
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT pg_advisory_unlock({CHAIN_LOCK_KEY})")


def _create_head() -> None:
    try:
        with transaction.atomic():
            AuditChainHead.objects.create(pk=1)
    except IntegrityError:
        return  # a concurrent first chainer created it; its lock is ours to wait for like everyone's
    if AuditEvent.objects.filter(seq__isnull=False).exists():
        # We just made a head although chained events exist: the real head was removed, and a
        # new one would fork the chain from the genesis hash. Raising rolls our head back.
        raise AuditChainError("the audit chain head is missing; run manage.py audit_verify")


def _execute_together(cursor: Any, statements: list[tuple[str, list[Any]]]) -> None:
    """Run ``statements`` in order, in one round trip where the driver sends several at once (psycopg's client-side
    binding; SQLite runs in this process, where a round trip costs nothing)."""
    if _sends_several(cursor):
        cursor.execute(";\n".join(sql for sql, _ in statements), [p for _, params in statements for p in params])
        return
    for sql, params in statements:
        cursor.execute(sql, params)


def _sends_several(cursor: Any) -> bool:
    if connection.vendor != "postgresql":
        return False
    from psycopg import ClientCursor  # only where PostgreSQL is the database

    return isinstance(cursor.cursor, ClientCursor)


@functools.cache
def _converters(vendor: str) -> list[tuple[str, list[Any], Any]]:
    """Per field of a waiting event: (name, the converters the ORM applies to it, its column)."""
    found = []
    for name in _WAITING:
        field = cast("Field[Any, Any]", AuditEvent._meta.get_field(name))
        column = field.get_col(AuditEvent._meta.db_table)
        found.append((name, connection.ops.get_db_converters(column) + field.get_db_converters(connection), column))
    return found


def _waiting_event(values: Sequence[Any]) -> tuple[int, dict[str, Any]]:
    """(id, the content to hash) of a waiting event's row, converted as the ORM converts it."""
    content: dict[str, Any] = {}
    for (name, converters, column), value in zip(_converters(connection.vendor), values, strict=True):
        for convert in converters:
            value = convert(value, column, connection)
        content[name] = value
    return int(content.pop("id")), content


def _db_params(rows: list[dict[str, Any]], columns: Sequence[str] = COLUMNS) -> list[Any]:
    ops = connection.ops
    return [
        ops.adapt_datetimefield_value(row[c])
        if c == "time"
        else ops.adapt_json_value(row[c], None)
        if c == "data"
        else row[c]
        for row in rows
        for c in columns
    ]


@dataclass(frozen=True)
class _Sql:
    insert: str  # ``{values}``: one ``row`` per event; the ids, each with whether the chain lock was taken
    insert_only: str  # the same without trying the lock: the ids alone
    row: str
    insert_chained: str  # ``{values}``: one ``chained_row`` per event
    chained_row: str
    link_arrays: str  # PostgreSQL: four arrays (ids, seqs, previous hashes, hashes)
    link_one: str  # elsewhere: one event (seq, prev_hash, hash, id)
    move_head: str
    read_waiting: str  # the head (locked), whether any event lies past it, and up to CHAIN_BATCH waiting events
    read_past: str  # the chained events past a seq, in order, PAST_BATCH at most
    waiting: str  # a condition: some event waits to be chained

    def insert_of(self, rows: int, *, try_lock: bool = True) -> str:
        return (self.insert if try_lock else self.insert_only).replace("{values}", ", ".join([self.row] * rows))

    def insert_chained_of(self, rows: int) -> str:
        return self.insert_chained.replace("{values}", ", ".join([self.chained_row] * rows))

    def link(self, ids: list[int], seqs: list[int], prevs: list[str], hashes: list[str]) -> list[tuple[str, list[Any]]]:
        """The statements linking the events ``ids``, with their parameters. PostgreSQL takes four arrays, so the
        text is the same for any number of events (the VALUES form cost more CPU to compose than to hash), and
        its trigger checks the links once the statement is done. SQLite's trigger checks each row against the
        one before it: one statement per event, in order."""
        if self.link_arrays:
            return [(self.link_arrays, [ids, seqs, prevs, hashes])]
        return [
            (self.link_one, [seq, prev, linked, pk])
            for pk, seq, prev, linked in zip(ids, seqs, prevs, hashes, strict=True)
        ]


@functools.cache
def _statements_for(vendor: str) -> _Sql:
    quote = connection.ops.quote_name
    events, head = quote(AuditEvent._meta.db_table), quote(AuditChainHead._meta.db_table)
    column = {f.name: quote(f.column or f.name) for f in AuditEvent._meta.concrete_fields}
    pk, seq = column["id"], column["seq"]
    postgres = vendor == "postgresql"
    insert = f"INSERT INTO {events} ({', '.join(column[c] for c in COLUMNS)}) VALUES {{values}} RETURNING {pk}"
    chained_columns = ", ".join(column[c] for c in CHAINED_COLUMNS)
    linked = ", ".join(f"{column[c]} = v.{column[c]}" for c in ("seq", "prev_hash", "hash"))
    link_columns = f"{pk}, {seq}, {column['prev_hash']}, {column['hash']}"
    waiting_columns = ", ".join(column[c] for c in _WAITING)
    return _Sql(
        # PostgreSQL tries the chain lock in the same statement (an uncorrelated sub-select: once).
        insert=(
            f"WITH ins AS ({insert}) SELECT {pk}, (SELECT pg_try_advisory_xact_lock({CHAIN_LOCK_KEY})) "
            f"FROM ins ORDER BY {pk}"
            if postgres
            else f"{insert}, 1"
        ),
        insert_only=f"WITH ins AS ({insert}) SELECT {pk} FROM ins ORDER BY {pk}" if postgres else insert,
        row="(" + ", ".join(["%s"] * len(COLUMNS)) + ")",
        insert_chained=f"INSERT INTO {events} ({chained_columns}) VALUES {{values}} RETURNING {pk}",
        chained_row="(" + ", ".join(["%s"] * len(CHAINED_COLUMNS)) + ")",
        link_arrays=(
            f"UPDATE {events} SET {linked} FROM unnest(%s::bigint[], %s::bigint[], %s::text[], %s::text[]) "
            f"AS v({link_columns}) WHERE {events}.{pk} = v.{pk}"
            if postgres
            else ""
        ),
        link_one=(f"UPDATE {events} SET {seq} = %s, {column['prev_hash']} = %s, {column['hash']} = %s WHERE {pk} = %s"),
        move_head=f"UPDATE {head} SET {quote('last_seq')} = %s, {quote('last_hash')} = %s WHERE {quote('id')} = 1",
        read_waiting=(
            f"SELECT h.{quote('last_seq')}, h.{quote('last_hash')}, "
            f"(SELECT {seq} FROM {events} WHERE {seq} > h.{quote('last_seq')} ORDER BY {seq} LIMIT 1), "
            + ", ".join(f"e.{column[c]}" for c in _WAITING)
            + f" FROM {head} h LEFT JOIN (SELECT {waiting_columns} FROM {events} WHERE {seq} IS NULL "
            f"ORDER BY {pk} LIMIT {CHAIN_BATCH}) e ON 1 = 1 WHERE h.{quote('id')} = 1 ORDER BY e.{pk}"
            + (" FOR UPDATE OF h" if postgres else "")
        ),
        read_past=f"SELECT {seq}, {column['hash']} FROM {events} WHERE {seq} > %s ORDER BY {seq} LIMIT {PAST_BATCH}",
        waiting=f"EXISTS (SELECT 1 FROM {events} WHERE {seq} IS NULL)",
    )


def _statements() -> _Sql:
    return _statements_for(connection.vendor)
