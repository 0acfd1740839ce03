"""Per-agent rate limits for /mcp: ``per_minute`` calls, refilled continuously (burst up to the limit).

Two counters with the same meaning:
- ``LocalRateLimiter``: a token bucket in this process. With N uvicorn workers an agent
  could make up to N times the limit, spread over N connections.
- ``RedisRateLimiter`` (when REDIS_URL is set): one count per agent for every worker and
  replica, kept in Redis by a script (GCRA, the token bucket as one timestamp per agent,
  on Redis's clock) in one round trip per request. While Redis cannot be reached it
  counts in this process instead, says so in the log, and tries Redis again after
  ``RETRY_AFTER_FAILURE_S``: a broken Redis must not take /mcp down with it.

``take(agent)`` is 0.0 when the call may go ahead (and is counted), else the seconds until
the agent may call again.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Protocol

import redis.asyncio as aioredis
from redis.commands.core import AsyncScript
from redis.exceptions import RedisError

logger = logging.getLogger(__name__)

KEY_PREFIX = "rewind:mcp:rate:"
RETRY_AFTER_FAILURE_S = 10.0
_REDIS_TIMEOUT_S = 0.5

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
        self._url = url  # may carry a password: never logged
        self._interval_us = 60_000_000 // per_minute
        self._tolerance_us = self._interval_us * (per_minute - 1)
        self._local = LocalRateLimiter(per_minute)
        self._scripts: dict[asyncio.AbstractEventLoop, AsyncScript] = {}
        self._down_until = 0.0  # monotonic; counting locally until then

    async def take(self, key: str) -> float:
        if time.monotonic() < self._down_until:
            return self._local.take_now(key)
        try:
            wait_us = await self._script()(keys=[KEY_PREFIX + key],
                                           args=[self._interval_us, self._tolerance_us])
        except (RedisError, OSError, TimeoutError) as exc:
            self._down_until = time.monotonic() + RETRY_AFTER_FAILURE_S
            logger.warning("rate limits are counted per process for %.0f s: Redis did not answer (%s)",
                           RETRY_AFTER_FAILURE_S, type(exc).__name__)
            return self._local.take_now(key)
        return max(0.0, int(wait_us) / 1_000_000)

    def _script(self) -> AsyncScript:
        # redis.asyncio connections belong to the event loop that opened them: one client per loop.
        loop = asyncio.get_running_loop()
        script = self._scripts.get(loop)
        if script is None:
            for closed in [other for other in self._scripts if other.is_closed()]:
                del self._scripts[closed]
            client = aioredis.Redis.from_url(self._url, socket_connect_timeout=_REDIS_TIMEOUT_S,
                                             socket_timeout=_REDIS_TIMEOUT_S)
            script = self._scripts[loop] = client.register_script(_GCRA)
        return script


def rate_limiter(per_minute: int, redis_url: str | None) -> RateLimiter:
    """Shared through Redis when there is one, else per process."""
    return RedisRateLimiter(redis_url, per_minute) if redis_url else LocalRateLimiter(per_minute)
