"""Per-agent rate limits for /mcp: at most ``per_minute`` calls in any 60 seconds, exactly (docs/mcp.md).

A sliding window, since a token bucket of the same depth lets nearly twice through in the first minute;
``MCP_RATE_LIMIT_BURST`` adds pacing (GCRA). Counted once for the deployment in the shared store, so N workers
allow the limit, not N times it: a Redis script on Redis's clock, or one short transaction. Not the ``limits``
library: it has no SQL storage, stamps calls with each replica's clock, counts whole-second windows and paces no
bursts. ``take(agent)`` is 0.0 when the call may go (and is counted), else the seconds to wait.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import weakref
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cache
from typing import Protocol

from django.db import DatabaseError, connection, transaction
from django.db.backends.utils import CursorWrapper

from rewind.lib.sharedstore import DbStore, Fallback, RedisStore
from rewind.mcp.context import recycle_connections
from rewind.mcp.models import McpRateCall, McpRateCount

logger = logging.getLogger(__name__)

KEY_PREFIX = "rewind:mcp:rate:"
# How long a decision of the shared count waits for more calls while other requests are under way: in the
# database each trip is a thread hand-off and a write transaction (measured: see the benchmarks page).
GATHER_WINDOW_S = 0.002
MINUTE_US = 60_000_000
WINDOW_MARGIN_US = 200_000


@dataclass(frozen=True)
class RateLimit:
    """The figures of a limit and the one decision every counter makes with them."""

    per_minute: int
    burst: int | None = None  # None: calls need not be paced within the window

    @property
    def window_us(self) -> int:
        return MINUTE_US + WINDOW_MARGIN_US

    @property
    def interval_us(self) -> int:
        # At least 1 µs: a limit above 60 million a minute would otherwise round to 0.
        return max(1, MINUTE_US // self.per_minute)

    @property
    def tolerance_us(self) -> int:
        """How far GCRA's arrival time may run ahead of now; -1 when bursts are not limited."""
        return -1 if self.burst is None else self.interval_us * (self.burst - 1)

    def decide(self, nth_latest: int | None, tat: int, now: int) -> tuple[int, int]:
        """(µs to wait, 0 to go ahead; the pacing's next arrival time) for a call at ``now``, given ``nth_latest``,
        the ``per_minute``-th most recent accepted call (None when fewer), and ``tat`` as stored."""
        if nth_latest is not None and nth_latest >= now - self.window_us:
            return nth_latest + self.window_us - now + 1, tat
        if self.burst is None:
            return 0, tat
        tat = max(tat, now)
        if tat - self.tolerance_us > now:
            return tat - self.tolerance_us - now, tat
        return 0, tat + self.interval_us

    def describe(self) -> str:
        """The limit in words, for the 429 and the log."""
        text = f"at most {self.per_minute} requests in any 60 s (MCP_RATE_LIMIT_PER_MINUTE)"
        if self.burst is not None:
            text += (
                f", paced at {self.per_minute} a minute with bursts of at most {self.burst} at once "
                "(MCP_RATE_LIMIT_BURST)"
            )
        return text


class RateLimiter(Protocol):
    limit: RateLimit

    async def take(self, key: str, *, others_open: bool = False) -> float:
        """``others_open``: other requests of this process are under way, so more calls will come in a moment: a
        counter that pays per trip to its store may wait briefly to count them together."""
        ...


class LocalRateLimiter:
    def __init__(self, limit: RateLimit) -> None:
        self.limit = limit
        self._calls: dict[str, deque[int]] = {}
        self._tats: dict[str, int] = {}
        self._lock = threading.Lock()

    async def take(self, key: str, *, others_open: bool = False) -> float:
        return self.take_now(key)

    def take_now(self, key: str) -> float:
        now = time.monotonic_ns() // 1000
        with self._lock:
            calls = self._calls.setdefault(key, deque(maxlen=self.limit.per_minute))
            nth_latest = calls[0] if len(calls) == self.limit.per_minute else None
            wait, tat = self.limit.decide(nth_latest, self._tats.get(key, 0), now)
            if wait > 0:
                return wait / 1_000_000
            calls.append(now)
            self._tats[key] = tat
            return 0.0


# One script decides a batch of calls, one pair of KEYS per call: the agent's list of accepted
# call times, newest first, and its pacing's arrival time. They are decided in the order given, so
# two calls of one agent in a batch see each other as one after the other would. ARGV: the limit,
# the window, the pacing interval and tolerance (-1: no pacing), all µs. Each decision is
# RateLimit.decide's. Calls older than the window are dropped first, so the list holds the
# window's calls only, whatever the limit (a busy agent's list would otherwise keep growing
# towards it).
_SLIDING_WINDOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local interval = tonumber(ARGV[3])
local tolerance = tonumber(ARGV[4])
local function decide(calls, pace)
  local oldest = redis.call('LINDEX', calls, -1)
  while oldest and tonumber(oldest) < now - window do
    redis.call('RPOP', calls)
    oldest = redis.call('LINDEX', calls, -1)
  end
  local nth = redis.call('LINDEX', calls, limit - 1)
  if nth and tonumber(nth) >= now - window then return tonumber(nth) + window - now + 1 end
  if tolerance >= 0 then
    local tat = tonumber(redis.call('GET', pace) or '0')
    if tat < now then tat = now end
    if tat - tolerance > now then return tat - tolerance - now end
    tat = tat + interval
    redis.call('SET', pace, string.format('%d', tat), 'PX', math.ceil((tat - now) / 1000) + 1)
  end
  redis.call('LPUSH', calls, string.format('%d', now))
  redis.call('LTRIM', calls, 0, limit - 1)
  redis.call('PEXPIRE', calls, math.ceil(window / 1000) + 1)
  return 0
end
local waits = {}
for i = 1, #KEYS, 2 do waits[#waits + 1] = decide(KEYS[i], KEYS[i + 1]) end
return waits
"""


@dataclass
class _Batch:
    """One event loop's calls waiting for the shared count's decision, and whether a batch is being decided."""

    waiting: list[tuple[str, asyncio.Future[float]]] = field(default_factory=list)
    deciding: asyncio.Task[None] | None = None


class _Gatherer:
    """The calls of each event loop, decided together by ``decide``: those that arrive while a decision is out go
    in the next trip. With other requests under way a decision first waits ``GATHER_WINDOW_S`` for the calls
    they are about to send; a lone call does not wait."""

    def __init__(self, decide: Callable[[list[str]], Awaitable[list[float]]]) -> None:
        self._decide = decide
        self._batches: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Batch] = weakref.WeakKeyDictionary()

    async def take(self, key: str, *, gather: bool) -> float:
        loop = asyncio.get_running_loop()
        batch = self._batches.get(loop)
        if batch is None:
            batch = self._batches[loop] = _Batch()
        future: asyncio.Future[float] = loop.create_future()
        batch.waiting.append((key, future))
        if batch.deciding is None:
            batch.deciding = loop.create_task(self._decide_waiting(batch, gather=gather))
        return await future

    async def _decide_waiting(self, batch: _Batch, *, gather: bool) -> None:
        calls: list[tuple[str, asyncio.Future[float]]] = []
        try:
            if gather:
                await asyncio.sleep(GATHER_WINDOW_S)
            while batch.waiting:
                calls, batch.waiting = batch.waiting, []
                waits = await self._decide([key for key, _ in calls])
                for (_, future), wait in zip(calls, waits, strict=True):
                    if not future.done():  # a caller that went away was counted all the same
                        future.set_result(wait)
        except BaseException as exc:  # nobody may wait for ever: every caller left gets what happened
            for _, future in [*calls, *batch.waiting]:
                if not future.done():
                    future.set_exception(exc if isinstance(exc, Exception) else asyncio.CancelledError())
            batch.waiting = []
            if not isinstance(exc, Exception):
                raise
        finally:
            batch.deciding = None


def _now_us() -> int:
    return int(time.time() * 1_000_000)


@dataclass(frozen=True)
class _Sql:
    lock: str  # the agent's row, made if need be and locked until the transaction ends; gives tat, calls
    forget: str
    nth_latest: str
    count: str
    record: str
    save: str


@cache
def _statements() -> _Sql:
    quote = connection.ops.quote_name
    counts, calls = quote(McpRateCount._meta.db_table), quote(McpRateCall._meta.db_table)
    key, at, tat, n = quote("key"), quote("at"), quote("tat"), quote("calls")
    return _Sql(
        lock=f"INSERT INTO {counts} ({key}, {tat}, {n}) VALUES (%s, 0, 0) "
        f"ON CONFLICT ({key}) DO UPDATE SET {tat} = {counts}.{tat} RETURNING {tat}, {n}",
        forget=f"DELETE FROM {calls} WHERE {key} = %s AND {at} < %s",
        nth_latest=f"SELECT {at} FROM {calls} WHERE {key} = %s ORDER BY {at} DESC LIMIT 1 OFFSET %s",
        count=f"SELECT COUNT(*) FROM {calls} WHERE {key} = %s",
        record=f"INSERT INTO {calls} ({key}, {at}) VALUES (%s, %s)",
        save=f"UPDATE {counts} SET {tat} = %s, {n} = %s WHERE {key} = %s",
    )


@cache
def _local(limit: RateLimit) -> LocalRateLimiter:
    return LocalRateLimiter(limit)


def decide_in_db(limit: RateLimit, keys: Sequence[str]) -> list[float]:
    """Decide a call of each of ``keys`` in one short transaction, each agent's calls in the order given and the
    agents in key order: every transaction locks agents' rows in that one order, so processes never deadlock."""
    if connection.in_atomic_block:
        # Counted here, the write would last until the caller's transaction ends and hold
        # up every other process meanwhile; only a test calls from inside one.
        return [_local(limit).take_now(key) for key in keys]
    recycle_connections()
    sql = _statements()
    order = sorted(range(len(keys)), key=lambda i: keys[i])  # stable: each agent's calls keep their order
    waits = [0.0] * len(keys)
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            for i in order:
                waits[i] = _decide(sql, limit, cursor, keys[i], _now_us())
    except DatabaseError:
        connection.close_if_unusable_or_obsolete()
        raise
    return waits


def _decide(sql: _Sql, limit: RateLimit, cursor: CursorWrapper, key: str, now: int) -> float:
    cursor.execute(sql.lock, [key])
    tat, counted = cursor.fetchone()
    cursor.execute(sql.forget, [key, now - limit.window_us])
    in_window = counted - max(0, cursor.rowcount)
    # The calls themselves are read only when the count reaches the limit: walking the index to
    # the per_minute-th latest costs in proportion to the calls in the window, which a high
    # limit (100,000 a minute) made thousands of rows on every call.
    nth_latest = None
    if in_window >= limit.per_minute:
        cursor.execute(sql.nth_latest, [key, limit.per_minute - 1])
        found = cursor.fetchone()
        if found is not None:
            nth_latest = int(found[0])
        else:  # fewer calls than counted (rows deleted by hand): count them again
            cursor.execute(sql.count, [key])
            (in_window,) = cursor.fetchone()
    wait, new_tat = limit.decide(nth_latest, int(tat), now)
    if wait == 0:
        cursor.execute(sql.record, [key, now])
        in_window += 1
    if (new_tat, in_window) != (tat, counted):
        cursor.execute(sql.save, [new_tat, in_window, key])
    return wait / 1_000_000


class SharedRateLimiter:
    """The limit counted in ``store`` for every process (per process while it does not answer), an event loop's
    calls decided in batches: on SQLite every write transaction takes the one write lock the audit writer needs
    too."""

    def __init__(self, limit: RateLimit, store: RedisStore | DbStore) -> None:
        self.limit = limit
        self.store = store
        self._local = LocalRateLimiter(limit)
        self._fallback = Fallback(store, "rate limits are counted per process", logger)
        self._gatherer = _Gatherer(self._decided)
        # A thread of its own: the tools' pool may be busy with ZVM calls, and the count must
        # not wait for them. Each of its threads keeps one connection.
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="rewind-mcp-rate")

    async def take(self, key: str, *, others_open: bool = False) -> float:
        if not self._fallback.up():
            return self._local.take_now(key)
        return await self._gatherer.take(key, gather=others_open)

    async def _decided(self, keys: list[str]) -> list[float]:
        return await self._fallback.acall(lambda: self._in_store(keys), lambda: [self._local.take_now(k) for k in keys])

    async def _in_store(self, keys: list[str]) -> list[float]:
        if not isinstance(self.store, RedisStore):
            return await asyncio.get_running_loop().run_in_executor(self._pool, decide_in_db, self.limit, keys)
        limit = self.limit
        waits_us = await self.store.link.async_script(_SLIDING_WINDOW)(
            keys=[name for key in keys for name in (KEY_PREFIX + key, KEY_PREFIX + "pace:" + key)],
            args=[limit.per_minute, limit.window_us, limit.interval_us, limit.tolerance_us],
        )
        return [max(0.0, int(wait_us) / 1_000_000) for wait_us in waits_us]


def rate_limiter(limit: RateLimit, redis_url: str | None) -> SharedRateLimiter:
    """Shared through Redis when there is one, else through the database."""
    return SharedRateLimiter(limit, RedisStore(redis_url) if redis_url else DbStore())
