"""One Redis that all our processes share, and the switch to per-process counting while it is down.

The MCP rate limits (``rewind.mcp.ratelimit``) and the ZVM client's shared stores
(``rewind.sites.zvm_shared``, ``rewind.sites.circuit``) keep their counts in Redis when it is
configured. A broken Redis must not take /mcp or the ZVM calls down with it: after a failure the
caller works per process for ``RETRY_AFTER_FAILURE_S`` (``up()`` is False meanwhile), its log
says so once, and then Redis is tried again.

Short timeouts, so that a Redis that does not answer costs a call half a second, not a hang.
The URL may carry a password: it is never logged.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

import redis
import redis.asyncio as aioredis
from redis.commands.core import AsyncScript
from redis.exceptions import RedisError

RETRY_AFTER_FAILURE_S = 10.0
REDIS_TIMEOUT_S = 0.5
# Connections per event loop. A burst of calls waits for one of these instead of opening one
# each: under 120 agents starting at once, opening them (connect, HELLO, the client's
# maintenance-notification handshake) was an eighth of a replica's CPU. One script call holds a
# connection for a round trip, so a few serve thousands of calls a second. The wait for one is
# bounded apart from REDIS_TIMEOUT_S: a busy loop is not a Redis that does not answer.
LOOP_CONNECTIONS = 8
CONNECTION_WAIT_S = 5.0
# What a Redis that does not answer raises: its own errors, or a socket's (OSError, which
# TimeoutError and so asyncio's timeout are).
REDIS_DOWN: tuple[type[BaseException], ...] = (RedisError, OSError)

_logger = logging.getLogger(__name__)


@dataclass
class _LoopClient:
    client: aioredis.Redis
    scripts: dict[str, AsyncScript] = field(default_factory=dict)


class RedisLink:
    """The clients on the Redis at ``url``, and whether to use it now.

    ``client`` is a blocking client for threads; ``async_script`` gives scripts on a client of the
    running event loop. ``failed(exc, what)`` switches to per-process for a while, logging
    "<what> per process for 10 s: Redis did not answer (<error type>)" on ``logger`` (the
    caller's, so the log says which part went local).
    """

    def __init__(self, url: str, *, logger: logging.Logger = _logger) -> None:
        self._url = url
        self._logger = logger
        self.client = redis.Redis.from_url(url, socket_connect_timeout=REDIS_TIMEOUT_S, socket_timeout=REDIS_TIMEOUT_S)
        self._loops: dict[asyncio.AbstractEventLoop, _LoopClient] = {}
        self._down_until = 0.0  # monotonic; per process until then

    def up(self) -> bool:
        return time.monotonic() >= self._down_until

    def failed(self, exc: BaseException, what: str) -> None:
        self._down_until = time.monotonic() + RETRY_AFTER_FAILURE_S
        self._logger.warning(
            "%s per process for %.0f s: Redis did not answer (%s)", what, RETRY_AFTER_FAILURE_S, type(exc).__name__
        )

    def async_script(self, source: str) -> AsyncScript:
        """``source`` registered on the running event loop's client (one client per loop)."""
        # redis.asyncio connections belong to the event loop that opened them; a closed loop's
        # client is dropped when the next loop comes.
        loop = asyncio.get_running_loop()
        held = self._loops.get(loop)
        if held is None:
            for closed in [other for other in self._loops if other.is_closed()]:
                del self._loops[closed]
            pool = aioredis.BlockingConnectionPool.from_url(
                self._url,
                max_connections=LOOP_CONNECTIONS,
                timeout=CONNECTION_WAIT_S,
                socket_connect_timeout=REDIS_TIMEOUT_S,
                socket_timeout=REDIS_TIMEOUT_S,
            )
            held = self._loops[loop] = _LoopClient(aioredis.Redis(connection_pool=pool))
        script = held.scripts.get(source)
        if script is None:
            script = held.scripts[source] = held.client.register_script(source)
        return script

    def event_loops_held(self) -> int:
        """How many event loops have a client here (closed ones are dropped as new ones come)."""
        return len(self._loops)
