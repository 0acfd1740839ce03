"""Events inserted unchained and chained after commit: one chain from many processes, rollbacks,
the database's guards on chained and unchained rows, and readers while some events wait."""

from __future__ import annotations

import multiprocessing
import threading
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import DatabaseError, connection, connections, transaction
from django.test import Client
from django.utils import timezone

from rewind.audit import Actor, AuditEntry, audit_append, audit_record, chain_pending, verify_chain
from rewind.audit.anchors import audit_anchor_publish
from rewind.audit.chaining import CHAIN_LOCK_KEY, insert_unchained
from rewind.audit.selectors import audit_chain_position, audit_event_list, audit_event_trail
from rewind.audit.tasks import audit_chain_pending
from rewind.celery import app as celery_app
from rewind.models import AuditChainHead, AuditEvent
from tests.audit.support import raw_update
from tests.fixtures import wait_until

WRITERS, PER_WRITER = 4, 40


def _row(action: str, *, age: timedelta = timedelta(0), target_id: str = "1") -> dict[str, Any]:
    return {
        "time": timezone.now() - age,
        "actor_type": "agent",
        "actor": "left-behind",
        "action": action,
        "target_type": "thing",
        "target_id": target_id,
        "target_repr": target_id,
        "data": {"action": action},
        "request_id": "req-left",
    }


def _left_waiting(action: str, **kwargs: Any) -> AuditEvent:
    """An event committed unchained, as a writer leaves it that dies between its commit and chaining."""
    with transaction.atomic():
        (pk,) = insert_unchained([_row(action, **kwargs)])[0]
    return AuditEvent.objects.get(pk=pk)


def _record(n: int, action: str = "test.happened") -> list[AuditEvent]:
    return [audit_record(actor=Actor.agent("bot"), action=action, data={"i": i}) for i in range(n)]


def _write(writer: int, go: Any) -> None:
    """In a forked process: append PER_WRITER events, one per transaction."""
    connections.close_all()  # never the parent's connection
    go.wait()
    try:
        for i in range(PER_WRITER):
            with transaction.atomic():
                audit_record(actor=Actor.agent(f"w{writer}"), action="test.concurrent", data={"w": writer, "i": i})
    finally:
        connections.close_all()


@pytest.mark.process
@pytest.mark.django_db(transaction=True)
def test_writers_in_several_processes_leave_one_chain_with_every_event_once() -> None:
    connections.close_all()  # the children must not share this process's connection
    context = multiprocessing.get_context("fork")
    go = context.Event()
    writers = [context.Process(target=_write, args=(n, go)) for n in range(WRITERS)]
    for process in writers:
        process.start()
    go.set()
    for process in writers:
        process.join(120)
    assert [p.exitcode for p in writers] == [0] * WRITERS
    # No chain_pending here: the last chainer out must have left nothing waiting.
    assert not AuditEvent.objects.filter(seq__isnull=True).exists()
    assert verify_chain() == (WRITERS * PER_WRITER, None)
    written = sorted((e.data["w"], e.data["i"]) for e in AuditEvent.objects.all())
    assert written == [(w, i) for w in range(WRITERS) for i in range(PER_WRITER)]
    seqs = AuditEvent.objects.filter(seq__isnull=False).values_list("seq", flat=True)
    assert sorted(s or 0 for s in seqs) == list(range(1, WRITERS * PER_WRITER + 1))


def _lock_free_elsewhere() -> bool:
    """Whether another session could take the chain lock now (it lets it go at once)."""
    free: list[bool] = []

    def try_it() -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_try_advisory_lock(%s)", [CHAIN_LOCK_KEY])
                (got,) = cursor.fetchone()
                if got:
                    cursor.execute("SELECT pg_advisory_unlock(%s)", [CHAIN_LOCK_KEY])
                free.append(bool(got))
        finally:
            connections.close_all()

    thread = threading.Thread(target=try_it)
    thread.start()
    thread.join(30)
    return free == [True]


@pytest.mark.django_db(transaction=True)
def test_an_append_left_to_the_next_chainer_neither_chains_nor_locks_and_the_next_append_chains_it() -> None:
    """``audit_append(chain=False)``, as a gateway call's decision is written: no chaining in its
    transaction or after its commit, and the chain lock never held, so no chainer waits for it;
    the next ordinary append chains it, before its own event."""
    if connection.vendor != "postgresql":
        pytest.skip("SQLite runs one write transaction at a time: each append chains its own event")
    _record(1)  # the chain and its head row exist
    with transaction.atomic():
        (left,) = audit_append([AuditEntry(Actor.agent("bot"), "test.left", data={"n": 1})], chain=False)
        assert _lock_free_elsewhere()
    assert AuditEvent.objects.get(pk=left).seq is None
    (after,) = _record(1, "test.after")
    assert (AuditEvent.objects.get(pk=left).seq, after.seq) == (2, 3)
    assert verify_chain() == (3, None)


def _chainer_waits_for_the_head() -> bool:
    """Whether a session of this database holds the chain lock while it waits for a row lock."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity a JOIN pg_locks l ON l.pid = a.pid"
            " WHERE a.datname = current_database() AND a.wait_event_type = 'Lock'"
            " AND l.locktype = 'advisory' AND l.granted AND l.objid = %s",
            [CHAIN_LOCK_KEY & 0xFFFFFFFF],
        )
        (waiting,) = cursor.fetchone()
    return bool(waiting)


@pytest.mark.django_db(transaction=True)
def test_an_event_committed_while_another_chains_is_chained_by_that_chainer() -> None:
    """The chainer at work looks again after letting the lock go: an event whose own pass found the
    lock taken is not left behind."""
    if connection.vendor != "postgresql":
        pytest.skip("SQLite runs one write transaction at a time: each append chains its own event")
    _record(1)  # the chain and its head row exist
    _left_waiting("test.left")
    chained: list[int] = []
    head_held, chainer_done = threading.Event(), threading.Event()
    release_head = threading.Event()

    def hold_head() -> None:  # stands for a slow disk under the chainer: it stops at the head row
        with transaction.atomic():
            AuditChainHead.objects.select_for_update().get(pk=1)
            head_held.set()
            release_head.wait(60)
        connections.close_all()

    def chain() -> None:
        chained.append(chain_pending())
        connections.close_all()
        chainer_done.set()

    holder = threading.Thread(target=hold_head)
    holder.start()
    assert head_held.wait(60)
    chainer = threading.Thread(target=chain)
    chainer.start()
    # The chainer holds the chain lock and waits for the head row.
    wait_until(_chainer_waits_for_the_head, 60, what="the chainer waiting for the head row", every=0.01)
    (mine,) = _record(1, "test.mine")  # its inline try and its pass both find the chain lock taken
    assert mine.seq is None
    release_head.set()
    assert chainer_done.wait(60)
    holder.join(60)
    chainer.join(60)
    assert chained == [2]
    mine.refresh_from_db()
    assert mine.seq == 3
    assert verify_chain() == (3, None)


@pytest.mark.django_db(transaction=True)
def test_a_transaction_that_rolls_back_leaves_no_audit_row() -> None:
    _record(2)
    with pytest.raises(RuntimeError), transaction.atomic():  # noqa: PT012
        audit_record(actor=Actor.system(), action="test.undone")
        raise RuntimeError("the change failed")
    assert not AuditEvent.objects.filter(action="test.undone").exists()
    assert verify_chain() == (2, None)
    (after,) = _record(1, "test.after")
    assert after.seq == 3


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("chain", [True, False])
def test_a_batch_gets_each_event_its_own_id_in_order(chain: bool) -> None:
    """As the MCP audit writer appends: many events in one statement, each id the one of its own
    event, whatever the values hold."""
    entries = [
        AuditEntry(
            Actor.agent(f"agent-{n}"),
            f"test.batch.{n}",
            ("thing", str(n)),
            data={"n": n, "text": "ä'\"\\,{}" * (n % 3), "nested": [n, {"k": None}]},
            request_id=f"req-{n}" if n % 2 else None,
        )
        for n in range(37)
    ]
    ids = audit_append(entries, chain=chain)
    assert len(ids) == len(set(ids)) == len(entries)
    by_id = {event.pk: event for event in AuditEvent.objects.filter(pk__in=ids)}
    for n, pk in enumerate(ids):
        event = by_id[pk]
        assert (event.action, event.actor, event.target_id) == (f"test.batch.{n}", f"agent-{n}", str(n))
        assert event.data == entries[n].data
        if n % 2:  # the others get the request's own id
            assert event.request_id == f"req-{n}"
    chain_pending()
    assert verify_chain() == (len(entries), None)


@pytest.mark.django_db(transaction=True)
def test_a_chainer_that_rolls_back_leaves_what_it_chained_to_the_next() -> None:
    waiting = _left_waiting("test.left")
    with pytest.raises(RuntimeError), transaction.atomic():  # noqa: PT012
        audit_record(actor=Actor.system(), action="test.undone")  # chains the waiting event too, then rolls back
        raise RuntimeError("the change failed")
    waiting.refresh_from_db()
    assert waiting.seq is None
    assert chain_pending() == 1
    waiting.refresh_from_db()
    assert waiting.seq == 1
    assert verify_chain() == (1, None)
    assert list(AuditEvent.objects.values_list("action", flat=True)) == ["test.left"]


@pytest.mark.django_db(transaction=True)
def test_the_next_append_chains_what_a_dead_writer_left_and_so_does_the_beat() -> None:
    first = _left_waiting("test.left.first")
    (mine,) = _record(1, "test.mine")
    first.refresh_from_db()
    assert (first.seq, mine.seq) == (1, 2)  # oldest recording first
    second = _left_waiting("test.left.second")
    assert "rewind.audit.chain_pending" in {e["task"] for e in celery_app.conf.beat_schedule.values()}
    assert audit_chain_pending() == 1
    second.refresh_from_db()
    assert second.seq == 3
    assert verify_chain() == (3, None)


def _refused(sql: str, params: list[Any]) -> None:
    with pytest.raises(DatabaseError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql, params)


@pytest.mark.django_db
def test_the_database_lets_an_event_be_chained_once_and_changes_nothing_else() -> None:
    (chained,) = _record(1)
    waiting = _left_waiting("test.left")
    table = connection.ops.quote_name(AuditEvent._meta.db_table)
    # A chained event: its chain fields and its content are fixed.
    _refused(f"UPDATE {table} SET hash = %s WHERE id = %s", ["f" * 64, chained.pk])
    _refused(f"UPDATE {table} SET prev_hash = %s WHERE id = %s", ["f" * 64, chained.pk])
    _refused(f"UPDATE {table} SET seq = 9 WHERE id = %s", [chained.pk])
    _refused(f"UPDATE {table} SET seq = NULL, prev_hash = NULL, hash = NULL WHERE id = %s", [chained.pk])
    _refused(f"UPDATE {table} SET actor = 'mallory' WHERE id = %s", [chained.pk])
    # A waiting event: only all three chain fields at once, its content unchanged.
    _refused(f"UPDATE {table} SET actor = 'mallory' WHERE id = %s", [waiting.pk])
    _refused(f"UPDATE {table} SET seq = 2 WHERE id = %s", [waiting.pk])
    _refused(
        f"UPDATE {table} SET seq = 2, prev_hash = %s, hash = %s, data = %s WHERE id = %s",
        [chained.hash, "e" * 64, '{"forged": true}', waiting.pk],
    )
    _refused(f"DELETE FROM {table} WHERE id = %s", [waiting.pk])
    assert chain_pending() == 1
    waiting.refresh_from_db()
    _refused(f"UPDATE {table} SET seq = 3, prev_hash = %s, hash = %s WHERE id = %s", ["a" * 64, "b" * 64, waiting.pk])
    assert verify_chain() == (2, None)


@pytest.mark.django_db(transaction=True)
def test_tampering_with_a_chained_event_is_found_while_others_wait() -> None:
    _record(3)
    tampered = AuditEvent.objects.get(seq=2)
    _left_waiting("test.left")
    raw_update(tampered, "data", """'{"i": 99}'""")
    with pytest.raises(CommandError, match=r"BROKEN at event #2\b"):
        call_command("audit_verify")


@pytest.mark.django_db
def test_an_event_left_unchained_too_long_is_a_problem(settings: Any) -> None:
    settings.REWIND_AUDIT_CHAIN_LAG_S = 60
    _record(2)
    _left_waiting("test.fresh")
    assert verify_chain() == (2, None)  # waiting for less than the bound: fine
    stale = _left_waiting("test.stale", age=timedelta(minutes=5))
    checked, problem = verify_chain()
    assert checked == 2
    assert problem is not None
    assert problem.seq == 3
    assert f"id {stale.pk}" in problem.reason
    assert "not chained" in problem.reason


@pytest.fixture
def some_waiting(db: None) -> tuple[list[AuditEvent], AuditEvent]:
    """Three chained events on thing 1, then one waiting on thing 1 as well."""
    chained = [
        audit_record(actor=Actor.agent("bot"), action="test.happened", target=("thing", "1"), request_id=f"req-{i}")
        for i in range(3)
    ]
    return chained, _left_waiting("test.waiting")


def test_readers_list_waiting_events_where_they_were_recorded(
    some_waiting: tuple[list[AuditEvent], AuditEvent], api: Any, viewer: Any, admin_client: Client
) -> None:
    chained, waiting = some_waiting
    newest_first = [waiting.pk, *(e.pk for e in reversed(chained))]
    assert [e.pk for e in audit_event_list()] == newest_first
    assert [e.pk for e in audit_event_trail(targets=[("thing", "1")])] == list(reversed(newest_first))
    assert audit_chain_position() == (3, chained[-1].hash)

    client = api(viewer)
    page = client.get("/api/audit/?limit=2").json()
    rest = client.get(page["next"]).json()
    rows = page["results"] + rest["results"]
    assert [(r["seq"], r["action"]) for r in rows] == [
        (None, "test.waiting"),
        (3, "test.happened"),
        (2, "test.happened"),
        (1, "test.happened"),
    ]
    assert rest["next"] is None

    html = admin_client.get("/admin/rewind/auditevent/").content.decode()
    assert html.index("test.<wbr>waiting") < html.index("test.<wbr>happened")
    assert admin_client.get("/admin/").status_code == 200  # the dashboard's audit section


def test_anchors_vouch_for_the_chained_events_only(
    some_waiting: tuple[list[AuditEvent], AuditEvent], settings: Any, tmp_path: Any
) -> None:
    settings.REWIND_AUDIT_ANCHOR_FILE = tmp_path / "anchors.jsonl"
    chained, _waiting = some_waiting
    publication = audit_anchor_publish()
    assert publication.published is not None
    assert (publication.published.seq, publication.published.hash) == (3, chained[-1].hash)
