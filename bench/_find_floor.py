"""The app with its MCP calls' audit rows left unwritten: a floor bench/mcp_find.py measures, never a server.

``application`` is ``rewind.asgi.application`` but for one thing: the audit writer's batch
transaction (``rewind.mcp.auditlog._append_committed``) is skipped, and the callers waiting for
their rows are told at once that they were committed. Everything else of a call is the product's
own path, unchanged: the bearer token, the shared rate count, the envelope and scopes, the SDK's
server path, the tool with its caches, the hand-off to the writer thread and back.

So a look-up's CPU here, beside the real one's, is what its fail-closed audit row costs to write,
and the throughput over the echo is what the rest of the path alone would reach. It records
nothing, so nothing may serve it: it is a measuring instrument.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rewind import asgi
from rewind.mcp import auditlog


def _committed_unwritten(batch: list[Any], committed: Callable[[], None]) -> None:
    committed()


auditlog._append_committed = _committed_unwritten  # read by the writer thread at each batch
application = asgi.application
