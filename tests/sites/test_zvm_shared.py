"""The shared ZVM stores (Redis and database), each tested directly whatever the settings say.

The simulator counts what it got: ``/_sim/sites/{slug}/rate`` (the most requests in any one
second, and the total) and ``/_sim/sites/{slug}/calls`` (per route). Redis is the machine's
own, on a database of these tests (7), whose keys they delete before and after.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import redis

from rewind.lib.processes import free_port
from rewind.lib.sharedstore import DbStore, RedisStore
from rewind.sites.zvm_shared import (
    CLAIM_PREFIX,
    RATE_PREFIX,
    TOKEN_PREFIX,
    SharedPacer,
    SharedTokenStore,
    db_stores,
    redis_stores,
)
from rewind.zvm import Stores, ZvmClient
from tests.helpers import TOKEN_CALL, calls, connection, site_name
from tests.helpers import test_database_url as database_url_for_processes
from tests.simfixtures import PYTHON, REPO, SimHandle
from tests.workerenv import private_redis_url

REDIS_URL = private_redis_url(0)  # a database of its own beside the suite's (tests.workerenv)
STORES = ["redis", "db"]


def _flush_ours(client: redis.Redis) -> None:
    for prefix in (RATE_PREFIX, TOKEN_PREFIX, CLAIM_PREFIX):
        for key in client.scan_iter(match=prefix + "*"):
            client.delete(key)


@pytest.fixture
def redis_db() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=1)
    try:
        client.ping()
    except redis.RedisError:
        pytest.skip("no Redis server answers at 127.0.0.1:6379: the Redis stores need one")
    _flush_ours(client)
    yield client
    _flush_ours(client)
    client.close()


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest, transactional_db: None) -> str:
    """``redis`` or ``db``: which shared store a test runs on (the database committed, for other processes)."""
    if request.param == "redis":
        request.getfixturevalue("redis_db")
    return str(request.param)


def _stores(store: str) -> Stores:
    if store == "redis":
        pacer, tokens = redis_stores(REDIS_URL)[:2]
        return Stores(pacer=pacer, tokens=tokens)
    pacer, tokens = db_stores()[:2]
    return Stores(pacer=pacer, tokens=tokens)


def _rate(sim: SimHandle, slug: str) -> dict[str, Any]:
    return sim.control("GET", f"sites/{slug}/rate")


def _hammer(sim: SimHandle, store: str, *, processes: int, per_s: float, each: int) -> list[dict[str, Any]]:
    """Start ``processes`` worker processes on site-a at the same moment; their reports."""
    target = "db" if store == "db" else REDIS_URL
    go_at = time.time() + 4.0  # enough for each to set Django up first; a late one only starts late
    env = {"DATABASE_URL": database_url_for_processes(), "PYTHONUNBUFFERED": "1"}
    cmd = [
        PYTHON,
        "-m",
        "tests.sites.zvm_cap_worker",
        target,
        sim.site_url("site-a"),
        site_name(sim, "site-a"),
        str(per_s),
        str(each),
        str(go_at),
    ]
    procs = [
        subprocess.Popen(
            cmd, cwd=REPO, env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(processes)
    ]
    reports = []
    for proc in procs:
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err[-2000:]
        reports.append(json.loads(out.strip().splitlines()[-1]))
    return reports


@pytest.mark.process
def test_the_cap_holds_across_processes_and_they_log_in_once(sim: SimHandle, store: str) -> None:
    reports = _hammer(sim, store, processes=3, per_s=5, each=8)
    assert [r["errors"] for r in reports] == [[], [], []]
    assert [r["ok"] for r in reports] == [8, 8, 8]  # nothing dropped: over the cap a call waits
    rate = _rate(sim, "site-a")
    assert rate["requests"] == 3 * 8 + 1  # every call and the one login reached the ZVM
    assert rate["peak_per_s"] <= 5
    assert calls(sim, "site-a", TOKEN_CALL) == 1
    assert calls(sim, "site-a", "GET /v1/localsite") == 24


def test_the_stored_token_is_encrypted(sim: SimHandle, store: str, redis_db: redis.Redis) -> None:
    stores = _stores(store)
    conn = connection(sim)
    ZvmClient(conn, stores=stores).local_site()
    held = stores.tokens.get(conn.login_key)
    assert held is not None
    assert len(held.token) > 8
    if store == "redis":
        raw = redis_db.get(TOKEN_PREFIX + conn.login_key)
        assert isinstance(raw, bytes)  # the client does not decode
        text = raw.decode()
    else:
        from rewind.models import ZvmToken

        text = json.dumps(list(ZvmToken.objects.filter(key=conn.login_key).values().get().values()))
    assert held.token not in text
    assert conn.password not in text
    assert conn.username not in text.replace(conn.login_key, "")  # the key is a digest, not the name


def test_a_revoked_token_is_replaced_once_for_every_process(
    sim: SimHandle, store: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="rewind")
    stores = _stores(store)
    # Two clients with nothing in common but the store: as two processes would be.
    first, second = (ZvmClient(connection(sim), stores=stores) for _ in range(2))
    first.local_site()
    second.local_site()
    assert calls(sim, "site-a", TOKEN_CALL) == 1
    old = stores.tokens.get(connection(sim).login_key)
    sim.add_fault("expire_tokens")
    first.local_site()
    second.local_site()
    assert calls(sim, "site-a", TOKEN_CALL) == 2
    # Each client's own copy is refused once; the second then finds the first one's new token.
    assert calls(sim, "site-a", "GET /v1/localsite") == 2 + 2 + 2
    new = stores.tokens.get(connection(sim).login_key)
    assert old is not None
    assert new is not None
    assert new.token != old.token
    assert old.token not in caplog.text
    assert new.token not in caplog.text


def test_a_refused_token_is_dropped_only_if_it_is_still_the_stored_one(store: str) -> None:
    from rewind.zvm import StoredToken

    tokens = _stores(store).tokens
    key = "test-discard"
    tokens.put(key, StoredToken("token-one", time.time() + 60, 60))
    tokens.discard(key, "token-zero")  # an older token: someone already replaced it
    assert (held := tokens.get(key)) is not None
    assert held.token == "token-one"
    tokens.discard(key, "token-one")
    assert tokens.get(key) is None


def test_one_process_at_a_time_may_log_in(store: str) -> None:
    tokens = _stores(store).tokens
    assert tokens.claim_login("test-claim", 30)
    assert not tokens.claim_login("test-claim", 30)
    tokens.release_login("test-claim")
    assert tokens.claim_login("test-claim", 30)


def test_a_redis_that_does_not_answer_does_not_stop_zvm_calls(sim: SimHandle, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    store = RedisStore(f"redis://127.0.0.1:{free_port()}/7")  # nothing listens there
    stores = Stores(pacer=SharedPacer(store), tokens=SharedTokenStore(store))
    client = ZvmClient(connection(sim, max_requests_per_s=50.0), stores=stores)
    assert [client.local_site().name for _ in range(3)] == ["Site A"] * 3
    assert calls(sim, "site-a", TOKEN_CALL) == 1
    assert "Redis did not answer (ConnectionError)" in caplog.text
    assert "redis://" not in caplog.text


@pytest.mark.django_db(transaction=True)
def test_a_call_inside_a_transaction_holds_no_lock_on_the_shared_cap() -> None:
    from django.db import transaction

    from rewind.models import ZvmRateWindow

    pacer = SharedPacer(DbStore())
    pacer.reserve("zvm-in-tx", 5.0)
    before = ZvmRateWindow.objects.get(key="zvm-in-tx").recent
    with transaction.atomic():
        # Counted in this process: a row lock taken here would last until this block ends.
        pacer.reserve("zvm-in-tx", 5.0)
    assert ZvmRateWindow.objects.get(key="zvm-in-tx").recent == before
    pacer.reserve("zvm-in-tx", 5.0)
    assert len(ZvmRateWindow.objects.get(key="zvm-in-tx").recent.split()) == 2


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("second", "committed", "wait"),
    [
        # A slow commit (the write lock held by another process) is not added to the sender's
        # wait: counted from 100.4, not from 100.1 (which would send it 0.3 s late).
        (100.1, 100.4, 101.1 - 100.4),
        # One that ends after the slot says how late the sender is (not 0, go now, which would
        # hide it): the sender takes another slot.
        (100.9, 101.3, 101.1 - 101.3),
    ],
)
def test_the_shared_caps_wait_is_counted_from_when_the_reservation_returns(
    monkeypatch: pytest.MonkeyPatch, second: float, committed: float, wait: float
) -> None:
    import rewind.sites.zvm_shared as shared

    pacer = SharedPacer(DbStore())
    # One request per 1.1 s window. Reads of the clock: the first reservation (inside its
    # transaction, then after its commit) at 100.0; the second inside its transaction at
    # ``second``, its commit done at ``committed``. Its slot is 100.0 + 1.1.
    readings = iter([100.0, 100.0, second, committed])
    monkeypatch.setattr(shared, "time", SimpleNamespace(time=lambda: next(readings)))
    key = f"zvm-commit-{second}"
    assert pacer.reserve(key, 1.0) == 0.0
    assert pacer.reserve(key, 1.0) == pytest.approx(wait)


def test_a_slow_round_trip_to_redis_gives_its_slot_up(redis_db: redis.Redis) -> None:
    """Redis places the slot somewhere in the round trip: one longer than LATE_S would leave the
    sender late by as much, unseen. Its slot is given up (still counted) and another taken."""
    from rewind.zvm.pacing import LATE_S

    readings = iter([0.0, 3 * LATE_S, 10.0, 10.0 + LATE_S / 2])
    pacer = SharedPacer(RedisStore(REDIS_URL), clock=lambda: next(readings))
    assert pacer.reserve("zvm-slow-trip", 1.0) > 0.9  # the second slot: a window after the first
    assert redis_db.llen(RATE_PREFIX + "zvm-slow-trip") == 1  # a cap of 1 keeps one time
    assert next(readings, None) is None  # exactly two round trips


def test_a_quick_round_trip_to_redis_keeps_its_slot(redis_db: redis.Redis) -> None:
    readings = iter([0.0, 0.001])
    pacer = SharedPacer(RedisStore(REDIS_URL), clock=lambda: next(readings))
    assert pacer.reserve("zvm-quick-trip", 1.0) == 0.0
    assert next(readings, None) is None
