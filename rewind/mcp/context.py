"""What a tool may ask of the framework: who is calling, and a way to run sync services.

The agent comes from the verified bearer token (``get_access_token()`` is a contextvar the
SDK's auth middleware sets), never from a tool argument.

``run_db`` runs synchronous code (ORM, ZVM client) on a small dedicated thread pool. Django's
own ``sync_to_async`` would put every call of the process on one shared thread when called
from the MCP app (measured: 8 concurrent 100 ms calls took 810 ms), so it is not used here.
Each pool thread keeps its own database connection for its lifetime, so a process holds at
most ``POOL_SIZE`` connections for MCP work.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from django.db import DatabaseError, connections
from mcp.server.auth.middleware.auth_context import get_access_token

from rewind.errors import PermissionDeniedError

logger = logging.getLogger(__name__)
T = TypeVar("T")

# ZVM calls block on I/O, so a few more threads than cores pay off; each holds a DB connection.
POOL_SIZE = 8
_pool = ThreadPoolExecutor(max_workers=POOL_SIZE, thread_name_prefix="rewind-mcp")


def current_agent_name() -> str:
    """The calling agent's name. Raises ``PermissionDeniedError`` outside an authenticated call."""
    token = get_access_token()
    if token is None:
        raise PermissionDeniedError("this call carries no verified agent token")
    return token.client_id


def current_agent_id() -> int:
    """The calling agent's primary key (from the verified token)."""
    token = get_access_token()
    if token is None or token.subject is None:
        raise PermissionDeniedError("this call carries no verified agent token")
    return int(token.subject)


def recycle_connections() -> None:
    # What Django does around each request: drop connections that broke or outlived
    # CONN_MAX_AGE. With CONN_MAX_AGE=0 (the SQLite default) the thread keeps its connection.
    for conn in connections.all(initialized_only=True):
        if conn.settings_dict.get("CONN_MAX_AGE", 0) != 0 or conn.errors_occurred:
            conn.close_if_unusable_or_obsolete()


def _run_in_thread(fn: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any]) -> T:
    recycle_connections()
    try:
        return fn(*args, **kwargs)
    except DatabaseError:
        # A broken connection must not poison the next call on this thread.
        for conn in connections.all(initialized_only=True):
            if conn.in_atomic_block is False:
                conn.close_if_unusable_or_obsolete()
        raise


async def run_db(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run ``fn(*args, **kwargs)`` on the MCP thread pool; context vars (agent, request id) follow."""
    loop = asyncio.get_running_loop()
    ctx = contextvars.copy_context()
    call = functools.partial(ctx.run, _run_in_thread, fn, args, kwargs)
    return await loop.run_in_executor(_pool, call)
