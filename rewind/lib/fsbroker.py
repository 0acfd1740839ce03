"""The embedded Celery broker: kombu's filesystem transport (5.x), with files that appear whole.

kombu creates a message file, then writes it; a consumer polling in between takes it empty, dies on a
JSONDecodeError and loses the message. It makes an exchange table the same way, so a worker starting beside
another (``runstack`` starts two) died reading it empty, or truncated the other's binding. Here a message is
written under a name the consumer ignores and renamed into place (atomic within a folder), and a bind reads
and writes its table under one lock, never truncating it. It can go once kombu writes these files whole.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from time import monotonic
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import bytes_to_str, str_to_bytes
from kombu.utils.json import dumps, loads

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

    def _queue_bind(self, exchange: str, routing_key: str, pattern: str, queue: str) -> None:
        """Add the binding to the exchange's table: read and written under one lock, the file made if need be."""
        file = self._exchange_file(exchange)
        self.control_folder.mkdir(exist_ok=True)
        binding = filesystem.exchange_queue_t(routing_key or "", pattern or "", queue or "")
        try:
            with os.fdopen(os.open(file, os.O_RDWR | os.O_CREAT, 0o644), "rb+", buffering=0) as f:
                filesystem.lock(f, filesystem.LOCK_EX)
                try:
                    table = _table(f.read())
                    if binding not in table:
                        table.insert(0, binding)
                        f.seek(0)
                        f.truncate()
                        f.write(str_to_bytes(dumps(table)))
                finally:
                    filesystem.unlock(f)
        except OSError as exc:
            raise ChannelError(f"Cannot open {file}") from exc

    def get_table(self, exchange: str) -> list[Any]:
        """The exchange's bindings; an exchange file another worker has just made, still empty, has none yet."""
        file = self._exchange_file(exchange)
        try:
            with file.open("rb") as f:
                filesystem.lock(f, filesystem.LOCK_SH)
                try:
                    return _table(f.read())
                finally:
                    filesystem.unlock(f)
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise ChannelError(f"Cannot open {file}") from exc


def _table(content: bytes) -> list[Any]:
    return [filesystem.exchange_queue_t(*q) for q in loads(bytes_to_str(content))] if content.strip() else []


class Transport(filesystem.Transport):
    Channel = Channel
