"""The Celery broker on Redis: kombu's transport, with a channel that closes whole when Redis goes away.

kombu 5.7's Redis channel dies on a Redis restart whenever the worker holds a message it has not
acknowledged yet (a poll round's countdown, a running task): "Unrecoverable error:
AttributeError("'NoneType' object has no attribute 'hostname'")", and the worker exits. Measured
3 times in 3 with a guard waiting, 0 in 2 without. The chain:

1. the consumer's connection breaks; Celery's ``on_connection_error_after_connected`` first calls
   ``connection.collect()``, which closes the default channel. ``Channel.close`` starts by reading
   the reply of the BRPOP in flight (``_brpop_read``), which raises the connection error, so
   the close stops before the channel is marked closed or its unacknowledged messages restored;
2. ``collect()`` swallows that and lets go of the transport's client (``transport.client = None``);
3. Celery then calls ``connection.close()``, which closes the same channel again: now it gets as
   far as restoring the unacknowledged messages, which builds a new Redis pool from
   ``transport.client``, which is None. An AttributeError is no connection error, so Celery
   treats it as fatal.

Here the BRPOP read's error cannot stop the close, so the first close restores the messages while
the transport still knows Redis (if Redis is back already they are queued again at once; if not,
they stay in Redis's unacknowledged set, redelivered after the visibility timeout, and the
pollers' leases resume their guards long before that). A channel closed after its transport let
go says so with a connection error, which every caller of ``close`` expects, never an
AttributeError.
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
