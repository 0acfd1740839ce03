"""Task-queue outages (rewind/workers): noticed once, closed once, merged, and told to what waited."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from kombu.exceptions import OperationalError

from rewind.workers.broker import broker_refused
from rewind.workers.models import BrokerOutage
from rewind.workers.selectors import broker_outage_open, broker_outages_between, broker_outages_note
from rewind.workers.services import (
    BrokerProbe,
    _probe_broker,
    broker_outage_ended,
    broker_outage_noticed,
    broker_reconnected,
)

pytestmark = pytest.mark.django_db

BROKER = "Redis at 127.0.0.1:6399/0"


def test_an_outage_is_opened_once_whoever_notices_it_and_closed_once() -> None:
    assert broker_outage_noticed(broker=BROKER, error="refused", noticed_by="worker1")
    assert not broker_outage_noticed(broker=BROKER, error="refused again", noticed_by="web pid 7")
    outage = broker_outage_open()
    assert outage is not None
    assert outage.noticed_by == "worker1"
    assert outage.error == "refused"
    ended = broker_outage_ended()
    assert ended is not None
    assert ended.pk == outage.pk
    assert ended.ended_at is not None
    assert broker_outage_ended() is None
    assert broker_outage_open() is None


def test_a_heartbeat_probe_opens_an_outage_while_the_broker_does_not_answer_and_closes_it_when_it_does() -> None:
    answers: list[str | None] = ["ConnectionError: refused", "ConnectionError: refused", None]
    probe = BrokerProbe(broker=BROKER, ask=lambda: answers.pop(0))
    _probe_broker(probe, "worker1@host")
    _probe_broker(probe, "worker1@host")
    assert BrokerOutage.objects.filter(ended_at__isnull=True).count() == 1
    _probe_broker(probe, "worker1@host")
    assert broker_outage_open() is None
    assert BrokerOutage.objects.get().error == "ConnectionError: refused"


def test_a_reconnect_gives_a_probed_outage_its_true_start_and_records_a_short_one_itself() -> None:
    now = timezone.now()
    broker_outage_noticed(broker=BROKER, error="refused", noticed_by="worker1")
    broker_reconnected(broker=BROKER, lost_at=now - timedelta(seconds=9), noticed_by="worker2")
    broker_reconnected(broker=BROKER, lost_at=now - timedelta(seconds=8), noticed_by="worker1")
    (outage,) = BrokerOutage.objects.all()
    assert outage.started_at == now - timedelta(seconds=9)
    assert outage.ended_at is not None
    # A restart between two heartbeats: only the reconnect saw it.
    lost = timezone.now()
    broker_reconnected(broker=BROKER, lost_at=lost, noticed_by="worker1")
    short = BrokerOutage.objects.order_by("-started_at").first()
    assert short is not None
    assert short.started_at == lost
    assert short.ended_at is not None
    assert short.error == "the worker's connection to it broke"


def test_overlapping_outages_are_told_as_one_and_a_wait_without_any_as_nothing() -> None:
    t0 = timezone.now() - timedelta(minutes=10)
    BrokerOutage.objects.create(broker=BROKER, started_at=t0, ended_at=t0 + timedelta(seconds=20), noticed_by="a")
    BrokerOutage.objects.create(
        broker="b", started_at=t0 + timedelta(seconds=5), ended_at=t0 + timedelta(seconds=40), noticed_by="b"
    )
    (merged,) = broker_outages_between(t0 - timedelta(seconds=1), t0 + timedelta(minutes=1))
    assert merged.ended_at == t0 + timedelta(seconds=40)
    note = broker_outages_note(t0 - timedelta(seconds=1), t0 + timedelta(minutes=1))
    assert note.startswith(f"the task queue ({BROKER}) did not answer from ")
    assert "(40 s), so no poll round could run meanwhile" in note
    assert broker_outages_note(t0 + timedelta(minutes=2), t0 + timedelta(minutes=3)) == ""


def test_a_refused_message_records_the_outage_and_never_raises(caplog: Any) -> None:
    broker_refused(OperationalError("Error 111 connecting. Connection refused."), "the poll round of site 3")
    outage = broker_outage_open()
    assert outage is not None
    assert "Connection refused" in outage.error
    assert "could not queue the poll round of site 3" in caplog.text
