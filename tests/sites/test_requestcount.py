"""ZVM requests are counted in each process and written to the shared store in one go, a second later at most."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import redis

from rewind.lib.sharedstore import DbStore, RedisStore
from rewind.sites.models import ZvmRequestCount
from rewind.sites.requestcount import FLUSH_AFTER_S, REDIS_KEY, REQUESTS, BatchedRequestCounter
from tests.fixtures import wait_until
from tests.workerenv import private_redis_url

REDIS_URL = private_redis_url(1)  # a database of its own beside the suite's (tests.workerenv)


@pytest.mark.django_db(transaction=True)
def test_counts_reach_the_database_in_one_write_within_a_second_from_a_thread_that_lets_its_connection_go() -> None:
    a, b = _site(), _site()  # names of their own: other counters of this process may write meanwhile
    counter = BatchedRequestCounter(DbStore())
    for _ in range(5):
        counter.count(a, "2xx")
    counter.count(a, "timeout")
    counter.count(b, "2xx")
    assert not ZvmRequestCount.objects.filter(site__in=[a, b]).exists()  # nothing written per request

    def written() -> dict[tuple[str, str], int]:
        return {(r.site, r.result): r.count for r in ZvmRequestCount.objects.filter(site__in=[a, b])}

    seen = wait_until(written, timeout=10 * FLUSH_AFTER_S, what="the timer's write")
    assert seen == {(a, "2xx"): 5, (a, "timeout"): 1, (b, "2xx"): 1}
    assert counter._timer is None  # the timer thread wrote and ended

    counter.count(a, "2xx")
    assert counter.counts()[(a, "2xx")] == 6  # a read writes this process's own first


@pytest.mark.django_db(transaction=True)
def test_a_store_that_fails_loses_the_counts_and_never_the_call(caplog: pytest.LogCaptureFixture) -> None:
    counter = BatchedRequestCounter(DbStore())
    counter._fallback.failed(RuntimeError("down"))  # as after a failed write: the next ones are skipped
    site = _site()
    counter.count(site, "2xx")
    counter.flush()
    assert not ZvmRequestCount.objects.filter(site=site).exists()
    assert "ZVM requests are not counted" in caplog.text


def test_counts_reach_redis_in_one_pipelined_write() -> None:
    client: Any = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=1)
    try:
        client.ping()
    except redis.RedisError:
        pytest.skip("no Redis answers on 127.0.0.1:6379 (apt-get install redis-server; .ci/run starts it)")
    site = _site()
    counter = BatchedRequestCounter(RedisStore(REDIS_URL))
    for _ in range(3):
        counter.count(site, "2xx")
    counter.count(site, "5xx")
    counter.flush()
    assert {k: n for k, n in counter.store.totals(REQUESTS).items() if k[0] == site} == {
        (site, "2xx"): 3,
        (site, "5xx"): 1,
    }
    counter.count(site, "2xx")
    assert counter.counts()[(site, "2xx")] == 4
    client.hdel(REDIS_KEY, *(f'["{site}", "{r}"]' for r in ("2xx", "5xx")))


def _site() -> str:
    return f"Site {uuid.uuid4().hex[:8]}"
