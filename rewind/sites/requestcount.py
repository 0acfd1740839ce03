"""ZVM requests counted once for every process, by site and result (``rewind.zvm.counting``).

Why not prometheus-client's own counters: the service runs several processes (uvicorn
workers, Celery worker processes, beat), and a scrape of ``/metrics`` reaches one of them, so a
counter kept in each process would report that process's share only. prometheus-client's
multiprocess mode adds up files that each process writes, but only for processes on one host
that share one directory, wiped at every start: the web and the workers may run in different
containers. So the count lives where the processes already share state for the ZVM's request
cap: in Redis when ``REDIS_URL`` is set, else in the database (``ZvmRequestCount``). It also
outlives restarts, which Prometheus does not need but does not mind.

Each process adds its requests up for at most ``FLUSH_AFTER_S`` and writes them in one go
(``BatchedRequestCounter``): a write per request was a transaction per ZVM call, a tenth of a
guard's CPU. ``/metrics`` writes its own process's first, so it may lag the others by that
second. A count that cannot be written is lost, never retried and never an error for the call
it counts (nor those that a process dying within the second held); the log says so once per
``RETRY_AFTER_FAILURE_S``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from typing import Any, Protocol

from django.db import DatabaseError, connection, connections, transaction
from redis.exceptions import RedisError

from rewind.sites.models import ZvmRequestCount

logger = logging.getLogger(__name__)

REDIS_KEY = "rewind:zvm:requests"
RETRY_AFTER_FAILURE_S = 10.0
FLUSH_AFTER_S = 1.0
Counts = dict[tuple[str, str], int]


class CountStore(Protocol):
    def add(self, counts: Counts) -> None:
        """Add ``counts`` to the shared totals; never raises."""
        ...

    def counts(self) -> Counts: ...


class BatchedRequestCounter:
    """Requests counted in this process, written to ``store`` in one go at most ``FLUSH_AFTER_S`` later.

    The write happens on a timer thread of its own, which closes its database connection when
    done; ``flush`` writes at once (``/metrics``, tests).
    """

    def __init__(self, store: CountStore) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._pending: Counter[tuple[str, str]] = Counter()
        self._timer: threading.Timer | None = None

    def count(self, site: str, result: str) -> None:
        with self._lock:
            self._pending[(site, result)] += 1
            if self._timer is None:
                self._timer = threading.Timer(FLUSH_AFTER_S, self._flush_in_timer)
                self._timer.daemon = True
                self._timer.start()

    def flush(self) -> None:
        with self._lock:
            pending, self._pending = dict(self._pending), Counter()
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
        if pending:
            self.store.add(pending)

    def counts(self) -> Counts:
        """The shared totals, this process's own requests written first."""
        self.flush()
        return self.store.counts()

    def _flush_in_timer(self) -> None:
        try:
            self.flush()
        except Exception as exc:  # a metric never fails anything; nobody would hear of it on this thread
            logger.warning("ZVM requests were not counted (%s)", type(exc).__name__)
        finally:
            connections.close_all()  # this thread ends here; its connection must not outlive it


class _Outage:
    """Stop trying a broken store for a while, and say so once."""

    def __init__(self, where: str) -> None:
        self._where = where
        self._until = 0.0

    def down(self) -> bool:
        return time.monotonic() < self._until

    def failed(self, exc: BaseException) -> None:
        self._until = time.monotonic() + RETRY_AFTER_FAILURE_S
        logger.warning(
            "ZVM requests are not counted for %.0f s: %s did not answer (%s)",
            RETRY_AFTER_FAILURE_S,
            self._where,
            type(exc).__name__,
        )


class DbRequestCounter:
    """Counts in ``ZvmRequestCount``: one UPSERT per site and result, in one short transaction.

    Inside a caller's transaction (a test's) it counts under a savepoint, so that a failed
    count does not break it.
    """

    def __init__(self) -> None:
        self._outage = _Outage("the database")

    def add(self, counts: Counts) -> None:
        if self._outage.down() or not counts:
            return
        table = connection.ops.quote_name(ZvmRequestCount._meta.db_table)
        sql = (
            f'INSERT INTO {table} ("site", "result", "count") VALUES (%s, %s, %s) '
            f'ON CONFLICT ("site", "result") DO UPDATE SET "count" = {table}."count" + EXCLUDED."count"'
        )
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.executemany(sql, [[site, result, n] for (site, result), n in sorted(counts.items())])
        except DatabaseError as exc:
            self._outage.failed(exc)

    def counts(self) -> Counts:
        return {(site, result): n for site, result, n in ZvmRequestCount.objects.values_list("site", "result", "count")}


class RedisRequestCounter:
    """Counts in one Redis hash, field ``["<site>", "<result>"]``: one HINCRBY per site and result, pipelined."""

    def __init__(self, client: Any) -> None:
        self._client = client  # a redis.Redis with short timeouts (rewind.sites.zvm_shared)
        self._outage = _Outage("Redis")

    def add(self, counts: Counts) -> None:
        if self._outage.down() or not counts:
            return
        try:
            pipe = self._client.pipeline(transaction=False)
            for (site, result), n in counts.items():
                pipe.hincrby(REDIS_KEY, json.dumps([site, result]), n)
            pipe.execute()
        except (RedisError, OSError) as exc:
            self._outage.failed(exc)

    def counts(self) -> Counts:
        """Raises ``RedisError`` when Redis does not answer: a scrape reports that, not zeros."""
        out: Counts = {}
        for raw_field, raw_count in self._client.hgetall(REDIS_KEY).items():
            try:
                site, result = json.loads(raw_field)
            except (ValueError, TypeError):
                continue  # not written by us
            out[(str(site), str(result))] = int(raw_count)
        return out
