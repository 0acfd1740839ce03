"""The embedded Celery broker: kombu's filesystem transport, with message files that appear whole.

kombu's filesystem transport (5.x) publishes by creating ``<ms>_<uuid>.<queue>.msg``, then
locking it, then writing the payload; the consumer takes every ``*.<queue>.msg`` it lists
without locking it. A worker that polls the folder between the create and the write (a thread
switch in the publisher is enough) moves away an empty file, deletes it, and dies on the JSON
error ("Unrecoverable error: JSONDecodeError"): the message is lost and the worker is gone. A
poll round's message lost so leaves its guards waiting until the poller's queued lease runs out,
and nothing else runs until the worker is restarted. Measured: about 1 message in 10 with three busy
threads in the publishing process (the ASGI server's thread pool, or concurrent requests).

Here the payload is written under a name the consumer ignores and renamed into place; a rename
within one folder is atomic, so a consumer sees the whole message or nothing.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from time import monotonic
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps

# Not "<queue>.msg" after the first dot, so the consumer never takes a half-written file.
PARTIAL_SUFFIX = ".part"


class Channel(filesystem.Channel):
    def _put(self, queue: str, payload: Any, **kwargs: Any) -> None:  # type: ignore[override]  # as kombu's
        """Put ``payload`` onto ``queue``: written in full under a temporary name, then renamed."""
        # The same name as kombu's (its order is the queue's order: milliseconds first).
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        partial = final + PARTIAL_SUFFIX
        try:
            with open(partial, "wb") as f:
                f.write(str_to_bytes(dumps(payload)))
            os.replace(partial, final)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(partial)
            raise ChannelError(f"Cannot add file {final!r} to directory") from exc


class Transport(filesystem.Transport):
    Channel = Channel
