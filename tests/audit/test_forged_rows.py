"""A row written into the audit chain behind the service's back: the database refuses it, and one
that got in anyway (the triggers dropped) stops nothing and is reported where it stands."""

from __future__ import annotations

import io
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import DatabaseError, IntegrityError, connection, transaction
from django.test import Client

from rewind.audit import GENESIS_HASH, Actor, audit_record, verify_chain
from rewind.audit.actions import AuditLogAction
from rewind.models import AuditChainHead, AuditEvent, NotificationDelivery
from rewind.notifications.models import NotificationKind
from tests.audit.support import FORGED, event_content, event_insert_sql, raw_forge
from tests.helpers import METRICS_TOKEN, call_tool, scrape, tool_ok

pytestmark = pytest.mark.django_db(transaction=True)

EVENTS = AuditEvent._meta.db_table


def _record(n: int) -> list[AuditEvent]:
    return [audit_record(actor=Actor.agent("bot"), action="test.happened", data={"i": i}) for i in range(n)]


def _insert(*, seq: int | None, prev: str | None, chain_hash: str | None) -> None:
    chained = seq is not None or prev is not None or chain_hash is not None
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            event_insert_sql(chained=chained), event_content() + ([seq, prev, chain_hash] if chained else [])
        )


def test_the_database_refuses_a_chained_row_that_does_not_extend_the_chain_by_one() -> None:
    events = _record(3)
    last = events[-1].hash
    for seq, prev in ((4, "e" * 64), (5, last), (9_223_372_036_854_775_807, last), (3, events[1].hash)):
        with pytest.raises((DatabaseError, IntegrityError)):
            _insert(seq=seq, prev=prev, chain_hash=FORGED)
    with pytest.raises(DatabaseError):
        _insert(seq=4, prev=None, chain_hash=None)  # half chained
    assert AuditEvent.objects.count() == 3
    _insert(seq=None, prev=None, chain_hash=None)  # unchained: how every writer starts
    assert AuditEvent.objects.filter(seq__isnull=True).count() == 1


def test_the_database_refuses_to_chain_a_waiting_row_anywhere_but_next() -> None:
    events = _record(2)
    _insert(seq=None, prev=None, chain_hash=None)
    waiting = AuditEvent.objects.get(seq__isnull=True)
    update = f"UPDATE {EVENTS} SET seq = %s, prev_hash = %s, hash = %s WHERE id = %s"
    for seq, prev in ((3, "e" * 64), (10**15, events[-1].hash), (2, events[0].hash)):
        with pytest.raises((DatabaseError, IntegrityError)), transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(update, [seq, prev, FORGED, waiting.pk])
    assert AuditEvent.objects.get(pk=waiting.pk).seq is None
    audit_record(actor=Actor.system("tests"), action="test.after")  # the chainer links it, then this one
    assert verify_chain() == (4, None)


def test_the_database_keeps_one_head_row() -> None:
    _record(1)
    table = AuditChainHead._meta.db_table
    for pk, seq in ((2, 0), (1, 0), (2, 1)):
        with pytest.raises((DatabaseError, IntegrityError)), transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {table} (id, last_seq, last_hash) VALUES (%s, %s, %s)", [pk, seq, GENESIS_HASH]
            )
    assert AuditChainHead.objects.count() == 1


def test_the_next_link_with_a_wrong_hash_is_refused_or_named_by_the_backend() -> None:
    """PostgreSQL's writers insert unchained and a chainer links them, so it takes no chained INSERT;
    SQLite's writer inserts its events chained, so the database takes the next link by its seq and
    prev_hash, and the hash is the application's to judge."""
    events = _record(3)
    if connection.vendor == "postgresql":
        with pytest.raises(DatabaseError, match="goes in unchained"):
            _insert(seq=4, prev=events[-1].hash, chain_hash=FORGED)
        assert verify_chain() == (3, None)
        return
    _insert(seq=4, prev=events[-1].hash, chain_hash=FORGED)
    _record(2)  # chained after it: the head moved past it
    assert AuditChainHead.objects.get().last_seq == 6
    checked, problem = verify_chain()
    assert checked == 3
    assert problem is not None
    assert (problem.seq, problem.reason) == (4, "its content does not match its hash")


@pytest.mark.parametrize(
    "forged_at", ["next", "far past the end"], ids=["the next seq, any hash", "a seq far past the end"]
)
def test_a_row_forged_past_the_guards_stops_no_write_and_the_break_is_reported(
    forged_at: str, client: Client, settings: Any, receiver: Any, eager: None
) -> None:
    settings.REWIND_NOTIFY_URLS = [receiver.url("/ops")]
    settings.REWIND_METRICS_TOKEN = METRICS_TOKEN
    settings.REWIND_METRICS_ALLOWED_NETWORKS = []
    events = _record(3)
    seq = 4 if forged_at == "next" else 2**62
    raw_forge(seq=seq, prev=events[-1].hash or "")

    _record(2)  # every audited write still succeeds
    auditor = _superuser()
    call_command("createagent", "after-forgery", stdout=io.StringIO(), stderr=io.StringIO())
    # Linked after the forged row when it is the next link; else the chain goes on from the head.
    at, intact = (4, 3) if forged_at == "next" else (seq, 7)
    with pytest.raises(CommandError, match=rf"BROKEN at event #{at}\b") as broken:
        call_command("audit_verify", stdout=io.StringIO(), stderr=io.StringIO())
    reason = "does not match its hash" if forged_at == "next" else "past the end of the chain (#7)"
    assert reason in str(broken.value)
    assert f"({intact} events before it are intact)" in str(broken.value)

    verdict = AuditEvent.objects.get(action=AuditLogAction.CHAIN_BROKEN)
    assert verdict.seq is not None
    assert verdict.data["broken_at"] == at
    assert verdict.data["events"] == intact
    client.force_login(auditor)
    page = client.get("/admin/").content.decode()
    assert f"at event #{at}:" in page
    samples = scrape(client)
    assert samples[("rewind_audit_chain_intact", ())] == 0
    assert samples[("rewind_audit_chain_broken_at", ())] == at
    told = NotificationDelivery.objects.get(kind=NotificationKind.AUDIT_CHAIN_BROKEN)
    assert told.title == f"[zerto-rewind] The audit chain is BROKEN at event #{at}"
    assert told.dedupe_key == f"audit:chain-broken:{verdict.pk}"
    assert told.status == NotificationDelivery.Status.SENT
    assert f"BROKEN at event #{at}" in receiver.posts[0].payload["message"]
    # A second run names the same break and records it again; later writes still go on.
    with pytest.raises(CommandError, match=rf"BROKEN at event #{at}\b"):
        call_command("audit_verify", stdout=io.StringIO(), stderr=io.StringIO())
    _record(1)
    assert AuditEvent.objects.filter(action=AuditLogAction.CHAIN_BROKEN).count() == 2


def test_an_agents_tool_call_is_recorded_after_a_forged_row(mcp_client: Any, agent_token: Any) -> None:
    """The MCP endpoint answered "the call was not recorded in the audit log" to every call."""
    events = _record(2)
    raw_forge(seq=events[-1].seq + 1, prev=events[-1].hash or "")  # type: ignore[operator]
    _agent, token = agent_token
    listed = tool_ok(call_tool(mcp_client, token, "zerto_list_mutating_tools", {}))
    assert isinstance(listed["tools"], list)  # answered, not "the call was not recorded in the audit log"
    assert AuditEvent.objects.filter(action="mcp.tool.called", seq__gt=events[-1].seq + 1).exists()  # type: ignore[operator]


def _superuser() -> Any:
    from tests.fixtures import make_user

    return make_user("auditor", password="pw-auditor-123", superuser=True)
