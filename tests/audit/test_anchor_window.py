"""No unanchored window that matters: anchors every interval, on the way out and from audit_verify;
events no anchor covers past an interval, and an anchor file removed or cut back, fail the check."""

from __future__ import annotations

import io
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import time_machine
from celery.signals import worker_shutdown
from django.core.checks import run_checks
from django.core.management import CommandError, call_command
from django.utils import timezone

from rewind.audit import Actor, audit_record, verify_chain
from rewind.audit.actions import AuditLogAction
from rewind.audit.anchors import audit_anchor_publish, latest_anchor
from rewind.audit.verification import audit_anchor_publish_reported
from rewind.checks import anchors_beside
from rewind.models import AuditChainHead, AuditEvent
from tests.audit.support import raw_delete, raw_forge, raw_rewrite_from, raw_set_head

pytestmark = pytest.mark.django_db(transaction=True)

TEN_MINUTES = timedelta(minutes=10)


@pytest.fixture
def anchor_file(settings: Any) -> Path:
    settings.REWIND_AUDIT_ANCHOR_INTERVAL_S = 60
    settings.REWIND_AUDIT_ANCHOR_GRACE_S = 60
    return Path(settings.REWIND_AUDIT_ANCHOR_FILE)  # the test's own (tests/conftest.py)


@contextmanager
def _ten_minutes_ago() -> Iterator[None]:
    with time_machine.travel(timezone.now() - TEN_MINUTES, tick=True):
        yield


def _record(n: int) -> list[AuditEvent]:
    return [audit_record(actor=Actor.agent("bot"), action="test.happened", data={"i": i}) for i in range(n)]


def _verify(*args: str) -> str:
    out = io.StringIO()
    call_command("audit_verify", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_the_default_interval_is_a_minute_and_the_beat_keeps_it(settings: Any) -> None:
    from rewind import settings as defaults
    from rewind.celery import app

    assert defaults.REWIND_AUDIT_ANCHOR_INTERVAL_S == 60  # the suite sets no REWIND_AUDIT_ANCHOR_INTERVAL_S
    app.finalize()  # the beat's schedule is installed then
    entry = next(e for e in app.conf.beat_schedule.values() if e["task"] == "rewind.audit.publish_anchor")
    assert entry["schedule"] == float(defaults.REWIND_AUDIT_ANCHOR_INTERVAL_S)


def test_events_no_anchor_covers_past_an_interval_fail_the_check(anchor_file: Path) -> None:
    with _ten_minutes_ago():
        _record(3)
        audit_anchor_publish()
        _record(3)  # the beat stopped: never anchored
    with pytest.raises(CommandError, match=r"BROKEN at event #4\b: 3 event\(s\) recorded more than 120 s ago are "):
        _verify()
    # That verification anchored what it found: from now on a cut or a rewrite of them shows.
    assert "audit chain OK: 7 events" in _verify()


@pytest.mark.parametrize("tampering", ["cut", "rewritten"])
def test_a_cut_or_a_rewrite_after_the_last_anchor_older_than_an_interval_is_no_ok(
    anchor_file: Path, tampering: str
) -> None:
    with _ten_minutes_ago():
        events = _record(3)
        audit_anchor_publish()
        events += _record(3)
    if tampering == "cut":
        raw_delete(events[5])
        raw_set_head(5, events[4].hash)
    else:
        raw_set_head(6, raw_rewrite_from(events, 4))  # #5 on rewritten, links recomputed
    assert verify_chain()[1] is None  # the chain alone cannot tell
    with pytest.raises(CommandError, match=r"BROKEN at event #4\b: \d event\(s\) recorded more than 120 s ago"):
        _verify()


def test_within_an_interval_events_are_not_yet_a_failure(anchor_file: Path) -> None:
    _record(3)
    assert "audit chain OK: 3 events" in _verify()  # the beat has a minute (and its grace) to anchor them


@pytest.mark.parametrize("how", ["deleted", "emptied", "cut back"])
def test_an_anchor_file_removed_or_cut_back_is_broken_and_not_published_over(anchor_file: Path, how: str) -> None:
    _record(2)
    audit_anchor_publish()
    _record(2)
    audit_anchor_publish()
    assert AuditChainHead.objects.get().anchored_seq == 4
    if how == "deleted":
        anchor_file.unlink()
    elif how == "emptied":
        anchor_file.write_text("")
    else:
        anchor_file.write_text(anchor_file.read_text().splitlines()[0] + "\n")
    expected = (
        "its newest anchor is of event #2" if how == "cut back" else "the file is missing or empty"
    ) + r", but anchors were published up to event #4 \(the chain's head row records it\)"
    with pytest.raises(CommandError, match=rf"BROKEN at event #4\b: anchor at the end of .*: {expected}"):
        _verify()
    _record(1)
    publication = audit_anchor_publish_reported()
    assert publication.published is None  # a new anchor would make the cut file look whole
    assert publication.found is not None
    assert publication.found.broken_at == 4
    newest = latest_anchor(anchor_file)
    assert newest is None or newest.seq == 2
    # The verification recorded the break; the publisher found the same one and did not record it twice.
    assert AuditEvent.objects.filter(action=AuditLogAction.CHAIN_BROKEN).count() == 1


def test_the_head_row_refuses_to_forget_what_was_anchored(anchor_file: Path) -> None:
    from django.db import DatabaseError, transaction

    _record(2)
    audit_anchor_publish()
    for anchored in (1, None):
        with pytest.raises(DatabaseError), transaction.atomic():
            AuditChainHead.objects.filter(pk=1).update(anchored_seq=anchored)
    assert AuditChainHead.objects.get().anchored_seq == 2


def test_the_publisher_records_a_break_it_finds_once_and_anchors_past_it(anchor_file: Path) -> None:
    events = _record(3)
    audit_anchor_publish()
    raw_forge(seq=4, prev=events[-1].hash or "")
    _record(2)  # linked after the forged row: #5, #6

    publication = audit_anchor_publish_reported()
    assert publication.published is not None
    assert publication.published.seq == 6
    recorded = AuditEvent.objects.get(action=AuditLogAction.CHAIN_BROKEN)
    assert (recorded.actor, recorded.data["broken_at"], recorded.data["events"]) == ("audit anchor publisher", 4, 3)
    assert recorded.data["reason"] == "its content does not match its hash"
    audit_anchor_publish_reported()  # anchors the record itself; the break is behind the last anchor now
    audit_anchor_publish_reported()
    assert AuditEvent.objects.filter(action=AuditLogAction.CHAIN_BROKEN).count() == 1
    with pytest.raises(CommandError, match=r"BROKEN at event #4\b"):  # the full walk still finds it
        _verify()


def test_a_chain_that_no_longer_matches_its_anchor_is_recorded_once_and_never_anchored(anchor_file: Path) -> None:
    events = _record(4)
    audit_anchor_publish()
    raw_delete(*events[2:])
    raw_set_head(2, events[1].hash)
    _record(3)
    for _ in range(3):
        assert audit_anchor_publish_reported().published is None
    recorded = AuditEvent.objects.get(action=AuditLogAction.CHAIN_BROKEN)
    assert recorded.data["broken_at"] == 4
    assert "does not have the hash published for it" in recorded.data["reason"]


def test_a_worker_that_stops_anchors_what_was_recorded(anchor_file: Path) -> None:
    _record(3)
    worker_shutdown.send(sender=None)
    newest = latest_anchor(anchor_file)
    assert newest is not None
    assert newest.seq == 3


@pytest.mark.process
def test_a_web_process_that_stops_anchors_what_was_recorded(anchor_file: Path, tmp_path: Path) -> None:
    from tests.helpers import test_database_url
    from tests.mcpfixtures import run_uvicorn

    _record(3)
    with run_uvicorn(tmp_path / "web", database_url=test_database_url(), workers=1):
        assert latest_anchor(anchor_file) is None  # the beat's job, and no beat here
    newest = latest_anchor(anchor_file)
    assert newest is not None
    assert newest.seq == 3
    assert "audit chain OK: 3 events, every hash verified; matches 1 anchor(s)" in _verify()  # its anchor


def _deploy_warnings(folder: Path) -> dict[str, str]:
    return {m.id or "": m.msg for m in anchors_beside(folder)}


def test_check_deploy_warns_of_a_key_or_an_anchor_file_beside_the_database(settings: Any, tmp_path: Path) -> None:
    beside = tmp_path / "db"  # where a SQLite database file sits
    settings.REWIND_AUDIT_ANCHOR_KEY_PATH = beside / "audit-anchor.key"
    settings.REWIND_AUDIT_ANCHOR_FILE = beside / "audit-anchors.jsonl"
    warnings = _deploy_warnings(beside)
    assert "the key that signs the audit anchors" in warnings["rewind.W001"]
    assert str(beside) in warnings["rewind.W001"]
    assert "the audit anchors are written" in warnings["rewind.W002"]
    settings.REWIND_AUDIT_ANCHOR_KEY_PATH = None  # given in the environment itself
    settings.REWIND_AUDIT_ANCHOR_FILE = tmp_path / "elsewhere" / "audit-anchors.jsonl"
    assert not _deploy_warnings(beside)


def test_check_deploy_runs_the_anchor_check_on_the_database_in_use(settings: Any, tmp_path: Path) -> None:
    from django.db import connection

    def anchor_warnings() -> set[str]:
        return {m.id or "" for m in run_checks(include_deployment_checks=True)} & {"rewind.W001", "rewind.W002"}

    settings.REWIND_AUDIT_ANCHOR_KEY_PATH = None
    settings.REWIND_AUDIT_ANCHOR_FILE = tmp_path / "elsewhere" / "audit-anchors.jsonl"
    assert not anchor_warnings()
    settings.REWIND_AUDIT_ANCHOR_FILE = Path(connection.settings_dict["NAME"]).resolve().parent / "anchors.jsonl"
    # A SQLite file's folder holds the anchors now; a PostgreSQL database has no folder here to compare.
    assert anchor_warnings() == ({"rewind.W002"} if connection.vendor == "sqlite" else set())
