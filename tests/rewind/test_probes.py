"""``/health/`` and ``/ready/`` (rewind/probes.py), as a load balancer probes them: no login, no secrets.

A database that stops answering is probed on the production shape (tests/checkpoints/test_db_blip.py).
"""

from __future__ import annotations

import pytest
from django.test import Client

from rewind.workers.services import broker_outage_noticed

pytestmark = pytest.mark.django_db


def test_a_replica_is_alive_and_ready_without_a_login() -> None:
    client = Client()
    assert client.get("/health/").json() == {"ok": True}
    ready = client.get("/ready/")
    assert ready.status_code == 200
    body = ready.json()
    # Workers of other tests may share the queue's heartbeats: the count is whatever is alive.
    assert isinstance(body.pop("workers_alive"), int)
    assert body == {"ready": True, "database": "ok", "task_queue": "ok"}


def test_a_task_queue_outage_is_reported_but_leaves_the_replica_ready() -> None:
    broker_outage_noticed(broker="Redis at 10.0.0.5:6379/0", error="refused (password=secret)", noticed_by="w1")
    ready = Client().get("/ready/")
    assert ready.status_code == 200
    body = ready.json()
    assert body["task_queue"].startswith("not answering since ")
    assert "10.0.0.5" not in ready.content.decode()
    assert "secret" not in ready.content.decode()
