"""ZVM requests counted once for every process, by site and result (``rewind.zvm.counting``).

Why not prometheus-client's own counters: the service runs several processes (uvicorn
workers, Celery worker processes, beat), and a scrape of ``/metrics`` reaches one of them, so a
counter kept in each process would report that process's share only. prometheus-client's
multiprocess mode adds up files that each process writes, but only for processes on one host
that share one directory, wiped at every start: the web and the workers may run in different
containers. So the count lives where the processes already share state for the ZVM's request
cap: in Redis when ``REDIS_URL`` is set (one HINCRBY per request), else in the database (one
UPSERT per request, ``ZvmRequestCount``). It also outlives restarts, which Prometheus does not
need but does not mind.

A count that cannot be written is lost, never retried and never an error for the call it
counts; the log says so once per ``RETRY_AFTER_FAILURE_S``.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from django.db import DatabaseError, connection, transaction
from redis.exceptions import RedisError

from rewind.sites.models import ZvmRequestCount

logger = logging.getLogger(__name__)

REDIS_KEY = "rewind:zvm:requests"
RETRY_AFTER_FAILURE_S = 10.0
Counts = dict[tuple[str, str], int]


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
    """Counts in ``ZvmRequestCount``: one UPSERT statement per request.

    Outside a transaction the statement is its own short one. ZVM calls are not made inside
    transactions by design; one that is (a test's) counts in the caller's transaction, under a
    savepoint so that a failed count does not break it.
    """

    def __init__(self) -> None:
        self._outage = _Outage("the database")

    def count(self, site: str, result: str) -> None:
        if self._outage.down():
            return
        table = connection.ops.quote_name(ZvmRequestCount._meta.db_table)
        sql = (
            f'INSERT INTO {table} ("site", "result", "count") VALUES (%s, %s, 1) '
            f'ON CONFLICT ("site", "result") DO UPDATE SET "count" = {table}."count" + 1'
        )
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(sql, [site, result])
        except DatabaseError as exc:
            self._outage.failed(exc)

    def counts(self) -> Counts:
        return {(site, result): n for site, result, n in ZvmRequestCount.objects.values_list("site", "result", "count")}


class RedisRequestCounter:
    """Counts in one Redis hash, field ``["<site>", "<result>"]``: one HINCRBY per request."""

    def __init__(self, client: Any) -> None:
        self._client = client  # a redis.Redis with short timeouts (rewind.sites.zvm_shared)
        self._outage = _Outage("Redis")

    def count(self, site: str, result: str) -> None:
        if self._outage.down():
            return
        try:
            self._client.hincrby(REDIS_KEY, json.dumps([site, result]), 1)
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
