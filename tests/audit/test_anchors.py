"""Anchors outside the database: a chain someone cut, emptied or rewrote is reported broken, never OK."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from rewind.audit import Actor, audit_record, verify_chain
from rewind.audit.anchors import audit_anchor_publish, read_anchors
from rewind.models import AuditChainHead, AuditEvent
from tests.audit.support import raw_delete, raw_empty, raw_rewrite_from, raw_set_head

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def anchor_file(settings: Any) -> Path:
    return Path(settings.REWIND_AUDIT_ANCHOR_FILE)  # the test's own (tests/conftest.py)


def _record(n: int) -> list[AuditEvent]:
    return [audit_record(actor=Actor.agent("bot"), action="test.happened", data={"i": i}) for i in range(n)]


def _verify(*args: str) -> str:
    call_command("audit_verify", *args, stdout=(out := _Out()))
    return out.text


class _Out:
    def __init__(self) -> None:
        self.text = ""

    def write(self, s: str) -> None:
        self.text += s

    def flush(self) -> None:
        pass


def test_it_publishes_a_signed_anchor_only_when_the_chain_moved(anchor_file: Path) -> None:
    events = _record(3)
    first = audit_anchor_publish()
    assert first.published is not None
    assert (first.published.seq, first.published.hash) == (3, events[-1].hash)
    assert audit_anchor_publish().published is None  # unchanged
    _record(2)
    assert audit_anchor_publish().published is not None
    lines = [json.loads(line) for line in anchor_file.read_text().splitlines()]
    assert [line["seq"] for line in lines] == [3, 5]
    assert set(lines[0]) == {"seq", "hash", "time", "key", "sig"}
    verified = _verify("--anchors")
    assert "audit chain OK: 5 events, every hash verified; matches 2 anchor(s)" in verified
    # The verification is recorded as #6, and anchored at once: the next one holds the chain to it too.
    assert "recorded as audit event #6 (audit.chain.verified)\nanchor: published event #6\n" in verified
    assert "matches 3 anchor(s)" in _verify("--anchors")
    assert AuditChainHead.objects.get().anchored_seq == 7


def test_a_cut_tail_with_the_head_set_back_is_broken_not_ok(anchor_file: Path) -> None:
    """The case that said "audit chain OK: 40 events": delete the last 20 and set the head back."""
    events = _record(60)
    audit_anchor_publish()
    raw_delete(*events[40:])
    raw_set_head(40, events[39].hash)
    assert verify_chain() == (40, None)  # the chain alone cannot tell
    with pytest.raises(CommandError, match=r"BROKEN at event #60\b.*ends at event #40.*events were removed"):
        _verify()
    recorded = AuditEvent.objects.order_by("-seq").first()
    assert recorded is not None
    assert recorded.action == "audit.chain.broken"


def test_an_emptied_chain_is_broken_not_ok(anchor_file: Path) -> None:
    _record(5)
    audit_anchor_publish()
    raw_empty()
    with pytest.raises(CommandError, match=r"the chain is empty, but event #5 was published"):
        _verify()


def test_a_rewritten_chain_whose_links_all_hold_is_broken(anchor_file: Path) -> None:
    events = _record(5)
    audit_anchor_publish()
    # Rewrite from event 3 on, hashes and links recomputed: the chain verifies by itself.
    raw_set_head(5, raw_rewrite_from(events, 2))
    assert verify_chain() == (5, None)
    with pytest.raises(CommandError, match=r"BROKEN at event #5\b.*the chain was rewritten"):
        _verify()


def test_every_anchor_of_a_copy_is_checked_and_the_first_mismatch_named(anchor_file: Path, tmp_path: Path) -> None:
    """Someone who cut the chain and also the local file's last line: the copy elsewhere still tells."""
    events = _record(2)
    audit_anchor_publish()
    events += _record(2)
    audit_anchor_publish()
    copy = tmp_path / "copy.jsonl"
    copy.write_text(anchor_file.read_text())
    raw_delete(*events[2:])
    raw_set_head(2, events[1].hash)
    anchor_file.write_text(anchor_file.read_text().splitlines()[0] + "\n")
    # The head row remembers that #4 was anchored: the file cut back with the chain is no OK.
    with pytest.raises(CommandError, match=r"BROKEN at event #4\b.*newest anchor is of event #2, but anchors were"):
        _verify()
    with pytest.raises(CommandError, match=rf"BROKEN at event #4\b: anchor at line 2 of {copy}: the chain ends at"):
        _verify("--anchors", str(copy))


def test_a_forged_anchor_is_named(anchor_file: Path) -> None:
    _record(3)
    audit_anchor_publish()
    forged = json.loads(anchor_file.read_text())
    forged.update(seq=2, hash=AuditEvent.objects.get(seq=2).hash)
    with anchor_file.open("a") as f:
        f.write(json.dumps(forged) + "\n")
    with pytest.raises(CommandError, match=r"line 2 of .*signature does not verify"):
        _verify("--anchors")


def test_it_publishes_nothing_over_a_chain_that_does_not_follow_on(anchor_file: Path, caplog: Any) -> None:
    events = _record(4)
    audit_anchor_publish()
    raw_delete(*events[2:])
    raw_set_head(2, events[1].hash)
    _record(3)  # seq 3..5 again, on a cut chain
    result = audit_anchor_publish()
    assert result.published is None
    assert "does not match the last anchor" in result.note
    assert "audit anchor NOT published" in caplog.text
    assert len(anchor_file.read_text().splitlines()) == 1


def test_anchors_sent_to_syslog_verify_from_a_copy(anchor_file: Path, settings: Any, tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as receiver:
        receiver.bind(("127.0.0.1", 0))
        receiver.settimeout(5)
        settings.REWIND_AUDIT_ANCHOR_SYSLOG = f"udp://127.0.0.1:{receiver.getsockname()[1]}"
        _record(3)
        audit_anchor_publish()
        datagram = receiver.recv(65536).decode()
    assert datagram.startswith("<14>zerto-rewind: zerto-rewind audit anchor {")  # user.info
    copy = tmp_path / "syslog-copy.log"
    copy.write_text(f"Dec  3 07:00:00 host {datagram[4:]}\n")
    assert [a.seq for a in read_anchors(copy)] == [3]
    assert "matches 1 anchor(s) of " + str(copy) in _verify("--anchors", str(copy))


def test_an_existing_database_migrates_and_verifies(anchor_file: Path) -> None:
    from django.db.migrations.executor import MigrationExecutor

    _record(3)
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    try:  # back to before the guards existed (and events were chained after commit), and forward again
        executor.migrate([("rewind", "0023_mcp_rate_window")])
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())
    assert "audit chain OK: 3 events" in _verify()
    audit_anchor_publish()
    assert "matches 1 anchor(s)" in _verify("--anchors")


def test_a_verdict_counts_only_the_events_an_anchor_still_vouches_for(anchor_file: Path) -> None:
    """It said "BROKEN at event #471 … (648 events before it are intact)" after a rewrite of #300."""
    events = _record(2)
    audit_anchor_publish()  # vouches for #1-#2
    events += _record(3)
    audit_anchor_publish()  # #5
    events += _record(3)
    audit_anchor_publish()  # #8
    raw_set_head(8, raw_rewrite_from(events, 2))  # #3 on rewritten, every link recomputed: #2 is the last intact
    assert verify_chain() == (8, None)
    with pytest.raises(CommandError, match=r"BROKEN at event #8\b.*\(2 events before it are intact\)"):
        _verify()
    with pytest.raises(CommandError, match=r"BROKEN at event #5\b.*\(2 events before it are intact\)"):
        _verify("--anchors")
    recorded = AuditEvent.objects.filter(action="audit.chain.broken").order_by("id")
    assert [(e.data["broken_at"], e.data["events"]) for e in recorded] == [(8, 2), (5, 2)]


def test_a_verdict_on_a_broken_link_counts_the_events_before_it(anchor_file: Path) -> None:
    from tests.audit.support import raw_update

    events = _record(6)
    raw_update(events[3], "data", "'{\"i\": 99}'")  # #4 changed, its hash left as it was
    with pytest.raises(CommandError, match=r"BROKEN at event #4\b: its content.*\(3 events before it are intact\)"):
        _verify()
    raw_delete(events[1])  # #2 removed as well: the first break is now earlier
    with pytest.raises(
        CommandError, match=r"BROKEN at event #2\b: this event is missing.*\(1 event before it is intact\)"
    ):
        _verify()
