"""The embedded broker never lets a consumer see a message file before its payload is in it, nor a worker an exchange table half made."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from kombu import Connection

from rewind.lib.fsbroker import Transport


class _Probe:
    """Serialized in the middle of a publish: notes the message files a polling worker could take then."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.visible: list[str] | None = None

    def __json__(self) -> str:  # kombu's JSON encoder calls this while it writes the message
        self.visible = sorted(name for name in os.listdir(self.folder) if name.endswith(".msg"))
        return "probe"


@pytest.fixture
def queue_folder(tmp_path: Path) -> Path:
    (tmp_path / "control").mkdir()
    folder = tmp_path / "queue"
    folder.mkdir()
    return folder


@pytest.fixture
def channel(queue_folder: Path) -> Iterator[Any]:
    options = {
        "data_folder_in": str(queue_folder),
        "data_folder_out": str(queue_folder),
        "control_folder": str(queue_folder.parent / "control"),
        "store_processed": False,
    }
    with Connection("filesystem://", transport=Transport, transport_options=options) as conn:
        yield conn.default_channel


def test_a_message_file_is_visible_only_once_it_is_whole(channel: Any, queue_folder: Path) -> None:
    probe = _Probe(queue_folder)
    channel._put("jobs", {"body": probe, "n": 1})
    # kombu's own transport has created the (still empty) .msg file by then: a worker polling
    # at that moment reads nothing, deletes the file and dies on the JSON error.
    assert probe.visible == []
    assert [name.split(".", 1)[1] for name in os.listdir(queue_folder)] == ["jobs.msg"]
    assert channel._get("jobs") == {"body": "probe", "n": 1}
    assert os.listdir(queue_folder) == []


def test_an_exchange_file_another_worker_has_just_made_reads_as_no_bindings_yet(
    channel: Any, queue_folder: Path
) -> None:
    """kombu's bind creates the file, then locks and writes it: a worker in between found it empty
    and died at start-up on the JSON error (seen with two workers starting together)."""
    (queue_folder.parent / "control" / "celery.pidbox.exchange").touch()
    assert channel.get_table("celery.pidbox") == []
    channel._queue_bind("celery.pidbox", "", "", "worker1.celery.pidbox")
    assert [b.queue for b in channel.get_table("celery.pidbox")] == ["worker1.celery.pidbox"]


def test_workers_binding_at_once_keep_every_binding(channel: Any, queue_folder: Path) -> None:
    """Each bind reads and writes the table under one lock: none truncates another's binding away."""
    for round_ in range(10):
        exchange = f"exchange-{round_}"
        start = threading.Barrier(8)

        def bind(n: int, exchange: str = exchange, start: threading.Barrier = start) -> None:
            start.wait()
            channel._queue_bind(exchange, f"key-{n}", "", f"queue-{n}")

        threads = [threading.Thread(target=bind, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        assert sorted(b.queue for b in channel.get_table(exchange)) == [f"queue-{n}" for n in range(8)]


@pytest.mark.process
def test_the_embedded_broker_uses_it(tmp_path: Path) -> None:
    """With no REDIS_URL the Celery app publishes through this transport (checked in a fresh process)."""
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL")}
    env.update(REWIND_VAR_DIR=str(tmp_path / "var"), DJANGO_SETTINGS_MODULE="rewind.settings")
    probe = (
        "import django; django.setup()\n"
        "from rewind.celery import app\n"
        "with app.connection_for_write() as conn: print(type(conn.transport).__module__)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=settings.BASE_DIR, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == Transport.__module__
