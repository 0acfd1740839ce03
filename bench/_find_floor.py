"""The app with its MCP calls' audit rows left unwritten: a floor bench/mcp_find.py measures, never a server.

``rewind.asgi.application`` but that the audit writer's batch transaction is skipped and its callers told at
once that their rows committed; the rest of a call is the product's own path. So a look-up's CPU beside the real
one's is what its fail-closed audit row costs. It records nothing, so nothing may serve it.
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
