"""Per-agent rate limits for /mcp: ``per_minute`` calls, refilled continuously (burst up to the limit).

The count is kept once for the whole deployment, so N uvicorn workers allow the limit, not N
times it:
- ``RedisRateLimiter`` (when REDIS_URL is set): one count per agent for every worker and
  replica, kept in Redis by a script (GCRA, the token bucket as one timestamp per agent,
  on Redis's clock) in one round trip per request.
- ``DbRateLimiter`` (no Redis, e.g. ``make run``'s embedded default): the same GCRA in the
  database, ``McpRateCount``, one row per agent: one UPSERT statement per request, in its
  own short transaction (autocommit, on a thread of its own, never inside another
  transaction), so SQLite's write lock is held only for that statement. The clock is this
  machine's (replicas on several machines need synchronized clocks, as NTP gives).
- ``LocalRateLimiter``: a token bucket in this process; what the others fall back to.

While Redis or the database cannot be reached, the limit is counted in this process
instead, the log says so, and the shared count is tried again after
``RETRY_AFTER_FAILURE_S`` (for Redis, ``rewind.redislink`` decides): a broken counter must not
take /mcp down with it.

``take(agent)`` is 0.0 when the call may go ahead (and is counted), else the seconds until
the agent may call again.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from django.db import DatabaseError, connection

from rewind.mcp.context import recycle_connections
from rewind.mcp.models import McpRateCount
from rewind.redislink import REDIS_DOWN, RETRY_AFTER_FAILURE_S, RedisLink

logger = logging.getLogger(__name__)

KEY_PREFIX = "rewind:mcp:rate:"

# KEYS[1]: the agent's key. ARGV[1]: microseconds per call; ARGV[2]: the burst tolerance in
# microseconds ((limit - 1) calls). The key holds the "theoretical arrival time" of the next
# call; a call is refused while that lies more than the tolerance ahead of now.
_GCRA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local tolerance = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
local wait = tat - tolerance - now
if wait > 0 then return wait end
tat = tat + interval
redis.call('SET', KEYS[1], string.format('%d', tat), 'PX', math.ceil((tat - now) / 1000) + 1)
return 0
"""


class RateLimiter(Protocol):
    per_minute: int

    async def take(self, key: str) -> float: ...


class LocalRateLimiter:
    """Token bucket per key in this process."""

    def __init__(self, per_minute: int) -> None:
        self.per_minute = per_minute
        self.capacity = float(per_minute)
        self.rate = per_minute / 60.0
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    async def take(self, key: str) -> float:
        return self.take_now(key)

    def take_now(self, key: str) -> float:
        now = time.monotonic()
        with self._lock:
            tokens, stamp = self._buckets.get(key, (self.capacity, now))
            tokens = min(self.capacity, tokens + (now - stamp) * self.rate)
            if tokens >= 1.0:
                self._buckets[key] = (tokens - 1.0, now)
                return 0.0
            self._buckets[key] = (tokens, now)
            return (1.0 - tokens) / self.rate


class RedisRateLimiter:
    """The same limit counted in Redis for every process; see the module docstring."""

    def __init__(self, url: str, per_minute: int) -> None:
        self.per_minute = per_minute
        # At least 1 µs: a limit above 60 million a minute would otherwise round to 0 and refuse all.
        self._interval_us = max(1, 60_000_000 // per_minute)
        self._tolerance_us = self._interval_us * (per_minute - 1)
        self._local = LocalRateLimiter(per_minute)
        self._link = RedisLink(url, logger=logger)

    async def take(self, key: str) -> float:
        if not self._link.up():
            return self._local.take_now(key)
        try:
            script = self._link.async_script(_GCRA)
            wait_us = await script(keys=[KEY_PREFIX + key], args=[self._interval_us, self._tolerance_us])
        except REDIS_DOWN as exc:
            self._link.failed(exc, "rate limits are counted")
            return self._local.take_now(key)
        return max(0.0, int(wait_us) / 1_000_000)


# The GCRA of _GCRA above as one statement, the same in SQLite (3.35+) and PostgreSQL. Every
# SET expression reads the row as it was, so ``allowed`` and ``tat`` are decided together.
# Parameters: key, now + interval (a new row), then now, tolerance, now, now (allowed), then
# now, tolerance, now, now, now, interval (tat).
_LATER = "(CASE WHEN {t}.tat > %s THEN {t}.tat ELSE %s END)"
_GCRA_SQL = (
    'INSERT INTO {t} ("key", tat, allowed) VALUES (%s, %s, 1) ON CONFLICT ("key") DO UPDATE SET '
    "allowed = CASE WHEN " + _LATER + " - %s <= %s THEN 1 ELSE 0 END, "
    "tat = CASE WHEN " + _LATER + " - %s <= %s THEN " + _LATER + " + %s ELSE {t}.tat END "
    "RETURNING tat, allowed"
)


def _now_us() -> int:
    return int(time.time() * 1_000_000)


class DbRateLimiter:
    """The same limit counted in the database for every process; see the module docstring."""

    def __init__(self, per_minute: int) -> None:
        self.per_minute = per_minute
        # At least 1 µs: a limit above 60 million a minute would otherwise round to 0 and refuse all.
        self._interval_us = max(1, 60_000_000 // per_minute)
        self._tolerance_us = self._interval_us * (per_minute - 1)
        self._local = LocalRateLimiter(per_minute)
        self._down_until = 0.0
        self._sql = _GCRA_SQL.format(t=connection.ops.quote_name(McpRateCount._meta.db_table))
        # A thread of its own: the tools' pool may be busy with ZVM calls, and the count must
        # not wait for them. Each of its threads keeps one connection.
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="rewind-mcp-rate")

    async def take(self, key: str) -> float:
        if time.monotonic() < self._down_until:
            return self._local.take_now(key)
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._pool, self.take_now, key)
        except DatabaseError as exc:
            self._down_until = time.monotonic() + RETRY_AFTER_FAILURE_S
            logger.warning(
                "rate limits are counted per process for %.0f s: the database did not answer (%s)",
                RETRY_AFTER_FAILURE_S,
                type(exc).__name__,
            )
            return self._local.take_now(key)

    def take_now(self, key: str) -> float:
        """Count one call of ``key`` in one statement (its own transaction); 0.0 or the seconds to wait."""
        if connection.in_atomic_block:
            # Counted here, the write would last until the caller's transaction ends and hold
            # up every other process meanwhile; only a test calls from inside one.
            return self._local.take_now(key)
        recycle_connections()
        now = _now_us()
        interval, tolerance = self._interval_us, self._tolerance_us
        params: list[int | str] = [
            key,
            now + interval,
            now,
            now,
            now,
            tolerance,
            now,
            now,
            now,
            tolerance,
            now,
            now,
            interval,
        ]
        try:
            with connection.cursor() as cursor:
                cursor.execute(self._sql, params)
                tat, allowed = cursor.fetchone()
        except DatabaseError:
            if not connection.in_atomic_block:
                connection.close_if_unusable_or_obsolete()
            raise
        if allowed:
            return 0.0
        return max(0.0, (int(tat) - tolerance - now) / 1_000_000)


def rate_limiter(per_minute: int, redis_url: str | None) -> RateLimiter:
    """Shared through Redis when there is one, else through the database."""
    return RedisRateLimiter(redis_url, per_minute) if redis_url else DbRateLimiter(per_minute)
