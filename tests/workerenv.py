"""pytest plugin, loaded with ``-p`` before Django reads its settings: state of each xdist worker apart.

Under ``pytest -n N`` every worker is a test session of its own. pytest-django already gives
each its own test database (``test_<name>_gw0``…); what the settings read from the
environment is shared unless this splits it, before ``rewind.settings`` is imported:

- ``REWIND_VAR_DIR``: a folder per worker (the SQLite files, the filesystem broker's queue);
- ``REDIS_URL``: the database after it per worker, so one worker's Celery worker never takes
  another's tasks and each one's sweeps and counters stay its own.

The processes a test starts inherit the environment and so the worker's share. Tests that
want a Redis database of their own beside it ask ``private_redis_url(slot)``.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

REDIS_DATABASES = 16  # what a Redis server has unless configured otherwise
PRIVATE_SLOTS = 2  # Redis databases of its own a worker may hand out to its tests

WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
WORKER_INDEX = int(WORKER.removeprefix("gw")) if WORKER.startswith("gw") else 0
WORKER_COUNT = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
SHARED_REDIS_URL = os.environ.get("REDIS_URL")  # as given, before the split below


def _redis_db(url: str) -> int:
    path = urlsplit(url).path.strip("/")
    return int(path) if path.isdigit() else 0


def _with_redis_db(url: str, db: int) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{db}"))


def private_redis_url(slot: int) -> str:
    """A Redis database no other worker uses, counted down from the last one (slot < PRIVATE_SLOTS)."""
    if not 0 <= slot < PRIVATE_SLOTS:
        raise ValueError(f"slot {slot} out of 0..{PRIVATE_SLOTS - 1}")
    db = REDIS_DATABASES - 1 - slot - PRIVATE_SLOTS * WORKER_INDEX
    if SHARED_REDIS_URL and db < _redis_db(SHARED_REDIS_URL) + WORKER_COUNT:
        raise RuntimeError(f"too many xdist workers for one Redis: worker {WORKER} would share database {db}")
    return _with_redis_db(SHARED_REDIS_URL or "redis://127.0.0.1:6379/0", db)


def _split_per_worker() -> None:
    base = os.environ.get("REWIND_VAR_DIR") or str(Path(__file__).resolve().parent.parent / "var")
    os.environ["REWIND_VAR_DIR"] = str(Path(base) / WORKER)
    if SHARED_REDIS_URL:
        os.environ["REDIS_URL"] = _with_redis_db(SHARED_REDIS_URL, _redis_db(SHARED_REDIS_URL) + WORKER_INDEX)


if WORKER:
    _split_per_worker()
