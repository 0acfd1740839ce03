from __future__ import annotations

import importlib
import itertools
import threading
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import DatabaseError, connection, connections, transaction
from django.utils import timezone

from rewind.audit import Actor, audit_record, mask_secrets, verify_chain
from rewind.audit.models import AppendOnlyError
from rewind.models import AuditChainHead, AuditEvent, Site
from tests.audit.support import audit_inserts_refused, raw_delete, raw_update

append_only = importlib.import_module("rewind.migrations.0002_audit_append_only")

TAMPERABLE = {
    "time": "'2001-01-01 00:00:00'",
    "actor_type": "'user'",
    "actor": "'mallory'",
    "action": "'site.deleted'",
    "target_type": "'x'",
    "target_id": "'999'",
    "target_repr": "'other'",
    "data": """'{"changed": true}'""",
    "request_id": "'forged'",
    "prev_hash": "'" + "1" * 64 + "'",
    "hash": "'" + "2" * 64 + "'",
    "seq": "1000",
}


def _record(n: int) -> list[AuditEvent]:
    return [
        audit_record(actor=Actor.agent("bot"), action="test.happened", target=("thing", str(i)), data={"i": i})
        for i in range(n)
    ]


@pytest.mark.django_db
def test_it_chains_events_and_verifies() -> None:
    events = _record(5)
    assert events[0].prev_hash == "0" * 64
    for before, after in itertools.pairwise(events):
        assert after.prev_hash == before.hash
    assert [e.seq for e in events] == [1, 2, 3, 4, 5]
    assert verify_chain() == (5, None)
    call_command("audit_verify")


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("column", sorted(TAMPERABLE))
def test_it_names_the_row_whose_field_was_changed(column: str) -> None:
    events = _record(4)
    raw_update(events[2], column, TAMPERABLE[column])
    with pytest.raises(CommandError, match=r"BROKEN at event #3\b"):
        call_command("audit_verify")


@pytest.mark.django_db
def test_each_verification_is_recorded_in_the_chain_it_checked(capsys: pytest.CaptureFixture[str]) -> None:
    _record(2)
    call_command("audit_verify")
    event = AuditEvent.objects.order_by("-seq").first()
    assert event is not None
    assert (event.seq, event.action, event.actor) == (3, "audit.chain.verified", "manage.py audit_verify")
    assert event.data["events"] == 2
    assert "recorded as audit event #3" in capsys.readouterr().out
    assert verify_chain() == (3, None)  # the record is itself part of the chain


@pytest.mark.django_db(transaction=True)
def test_a_broken_chain_is_recorded_as_broken() -> None:
    events = _record(4)
    raw_update(events[2], "actor", "'mallory'")
    with pytest.raises(CommandError, match=r"BROKEN at event #3\b"):
        call_command("audit_verify")
    event = AuditEvent.objects.order_by("-seq").first()
    assert event is not None
    assert event.action == "audit.chain.broken"
    assert (event.data["broken_at"], event.data["events"]) == (3, 2)


@pytest.mark.django_db(transaction=True)
def test_it_detects_a_deleted_row() -> None:
    events = _record(4)
    raw_delete(events[1])
    with pytest.raises(CommandError, match=r"BROKEN at event #2\b"):
        call_command("audit_verify")


@pytest.mark.django_db(transaction=True)
def test_it_detects_a_truncated_tail() -> None:
    events = _record(3)
    raw_delete(events[2])
    with pytest.raises(CommandError, match=r"BROKEN at event #3\b"):
        call_command("audit_verify")


@pytest.mark.django_db
def test_it_refuses_updates_and_deletes() -> None:
    (event,) = _record(1)
    with pytest.raises(AppendOnlyError):
        AuditEvent.objects.filter(pk=event.pk).update(actor="x")
    with pytest.raises(AppendOnlyError):
        AuditEvent.objects.all().delete()
    with pytest.raises(AppendOnlyError):
        event.delete()
    # The database itself refuses an UPDATE that goes around the ORM.
    with pytest.raises(DatabaseError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"UPDATE {AuditEvent._meta.db_table} SET actor = 'x' WHERE id = %s", [event.pk])


def _refused(sql: str, params: list[Any] | None = None) -> None:
    with pytest.raises(DatabaseError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql, params or [])


@pytest.mark.django_db
def test_the_database_refuses_to_cut_or_empty_the_chain() -> None:
    """DELETE passed on SQLite and TRUNCATE on PostgreSQL; the head row could be removed or set back."""
    events = _record(3)
    quote = connection.ops.quote_name
    table, head = quote(AuditEvent._meta.db_table), quote(AuditChainHead._meta.db_table)
    _refused(f"DELETE FROM {table} WHERE seq > 1")
    _refused(f"DELETE FROM {table}")
    _refused(f"DELETE FROM {head}")
    _refused(f"UPDATE {head} SET last_seq = 1, last_hash = %s", [events[0].hash])  # set back
    _refused(f"UPDATE {head} SET last_seq = 3, last_hash = %s", ["f" * 64])  # onto a hash no event has
    _refused(f"UPDATE {head} SET last_seq = 4, last_hash = %s", [events[2].hash])  # past the end
    if connection.vendor == "postgresql":
        _refused(f"TRUNCATE {table}")
        _refused(f"TRUNCATE {head}")
        _refused(f"TRUNCATE {table}, {head}")
    assert list(AuditEvent.objects.order_by("seq").values_list("seq", flat=True)) == [1, 2, 3]
    assert verify_chain() == (3, None)
    _record(1)  # the head still moves forward as appends need
    assert verify_chain() == (4, None)


@pytest.mark.django_db
def test_it_masks_secrets() -> None:
    event = audit_record(
        actor=Actor.user("alice"),
        action="test.masked",
        data={
            "password": "hunter2",
            "nested": {"client_secret": "s3", "ok": "visible"},
            "auth": "Bearer abc.def",
            "args": ["rwd_" + "x" * 30],
        },
    )
    event.refresh_from_db()
    flat = str(event.data)
    assert "hunter2" not in flat
    assert "s3" not in flat
    assert "abc.def" not in flat
    assert "xxxxxxxx" not in flat
    assert event.data["nested"]["ok"] == "visible"
    assert mask_secrets({"token": None}) == {"token": None}
    assert mask_secrets([" BEARER  abc ", "RWD_" + "y" * 24, "bearerish", "rwd_short"]) == [
        "***",
        "***",
        "bearerish",
        "rwd_short",
    ]


@pytest.mark.django_db(transaction=True)
def test_it_aborts_the_change_when_the_audit_write_fails() -> None:
    _record(1)
    # Both writes share one transaction on purpose: the failing audit write must undo the site.
    with audit_inserts_refused(), pytest.raises(DatabaseError), transaction.atomic():  # noqa: PT012
        Site.objects.create(name="x", base_url="https://zvm")
        audit_record(actor=Actor.system(), action="site.created", target=("site", "x"))
    assert not Site.objects.exists()
    assert AuditEvent.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_appends_leave_one_unbroken_chain() -> None:
    writers, per_writer = 6, 25
    errors: list[BaseException] = []
    start = threading.Barrier(writers)

    def write(n: int) -> None:
        try:
            start.wait()
            for i in range(per_writer):
                with transaction.atomic():
                    audit_record(actor=Actor.agent(f"w{n}"), action="test.concurrent", data={"i": i})
        except BaseException as exc:  # surfaced below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=write, args=(n,)) for n in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert verify_chain() == (writers * per_writer, None)
    assert AuditEvent.objects.count() == writers * per_writer


@pytest.mark.django_db
def test_what_is_hashed_is_what_the_database_gives_back() -> None:
    odd = {
        "ratio": 0.1,
        "big": 2**63,
        "nan": float("nan"),
        "inf": float("-inf"),
        "pair": ("a", 1),
        "nested": {3: None, "when": timezone.now()},
        "unicode": "café ✓",
    }
    event = audit_record(actor=Actor.system(), action="test.odd_values", data=odd)
    assert event.data["nan"] == "nan"
    assert event.data["inf"] == "-inf"
    assert event.data["pair"] == ["a", 1]
    assert event.data["nested"]["3"] is None
    assert verify_chain() == (1, None)
