"""Fixtures for notifications: a webhook receiver, and queued tasks run in place."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rewind.celery import app
from tests.notifications.receiver import Receiver, running_receiver


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with running_receiver() as r:
        yield r


@pytest.fixture
def eager() -> Iterator[None]:
    """Tasks queued on commit run right here: the queue is not what these tests are about."""
    app.loader.import_default_modules()  # every task registered: one not registered here would go to the broker
    before = app.conf.task_always_eager
    app.conf.task_always_eager = True
    try:
        yield
    finally:
        app.conf.task_always_eager = before
