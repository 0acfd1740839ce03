"""The Celery broker on Redis: kombu 5.7's transport, with a channel that closes whole when Redis goes away.

On a Redis restart while the worker held an unacknowledged message (a poll round's countdown, a running task),
kombu's ``Channel.close`` raised reading the BRPOP in flight and stopped before restoring that message; the
second close Celery makes then restored it through the transport's client, already None, and the worker
exited on the AttributeError. Here the BRPOP read's error cannot stop the first close, which restores the
messages while the transport still knows Redis; a channel closed after its transport let go raises a
connection error, which every caller of ``close`` expects. It can go once kombu's close does both.
"""

from __future__ import annotations

import contextlib
from queue import Empty
from typing import Any

import redis.exceptions
from kombu.transport import redis as kombu_redis


class Channel(kombu_redis.Channel):
    def close(self) -> None:
        if not self.closed and self._in_poll:
            # The reply of the BRPOP in flight. On a connection that broke it raises, and
            # kombu's close would stop right here (see the module); ``_brpop_read`` clears
            # ``_in_poll`` whatever happens, so the close below goes on.
            with contextlib.suppress(Empty, *self.connection_errors):
                self._brpop_read()
        super().close()

    def _connparams(self, asynchronous: bool = False) -> dict[str, Any]:
        if self.connection is None or self.connection.client is None:
            raise redis.exceptions.ConnectionError("the broker connection was closed")
        return dict(super()._connparams(asynchronous=asynchronous))


class Transport(kombu_redis.Transport):
    Channel = Channel
