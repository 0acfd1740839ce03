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
import weakref
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


def current_claims() -> dict[str, Any]:
    """What the token store said of the calling token beyond its agent (the agent's VM limit, ...)."""
    token = get_access_token()
    return dict(token.claims or {}) if token is not None else {}


def current_scopes() -> frozenset[str]:
    """The scopes (``rewind.mcp.scopes``) of the calling token; none outside an authenticated call."""
    token = get_access_token()
    return frozenset(token.scopes) if token is not None else frozenset()


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


class _ReadState[V]:
    """One event loop's reads: the one running and the one callers are joining."""

    def __init__(self) -> None:
        self.next: asyncio.Future[V] | None = None  # not started yet; callers arriving now join it
        self.task: asyncio.Task[None] | None = None  # running now


class SharedRead[V]:
    """``await read()``: the value of ``fn()`` (run with ``run_db``) as read after the await began.

    Callers that arrive while a read is running wait for the next one, which starts when the
    running one ends and serves all of them: under load one thread hand-off answers many
    calls, and no caller ever gets a value read before its own call began (so a change
    committed before that is seen).
    """

    def __init__(self, fn: Callable[[], V]) -> None:
        self._fn = fn
        self._states: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _ReadState[V]] = weakref.WeakKeyDictionary()

    async def __call__(self) -> V:
        loop = asyncio.get_running_loop()
        state = self._states.get(loop)
        if state is None:
            state = self._states[loop] = _ReadState()
        future = state.next
        if future is None:
            future = state.next = loop.create_future()
            if state.task is None:
                self._start(loop, state)
        # shield: one caller going away must not cancel the read the others wait for
        return await asyncio.shield(future)

    def _start(self, loop: asyncio.AbstractEventLoop, state: _ReadState[V]) -> None:
        future, state.next = state.next, None
        assert future is not None
        state.task = loop.create_task(self._read(loop, state, future))

    async def _read(self, loop: asyncio.AbstractEventLoop, state: _ReadState[V], future: asyncio.Future[V]) -> None:
        try:
            value = await run_db(self._fn)
        except asyncio.CancelledError:  # the loop is shutting down: so are the waiters
            future.cancel()
            if state.next is not None:
                state.next.cancel()
                state.next = None
            raise
        except Exception as exc:  # every waiter gets what the read raised
            if not future.done():
                future.set_exception(exc)
                future.exception()  # retrieved: no "never retrieved" warning when nobody waits
        else:
            if not future.done():
                future.set_result(value)
        finally:
            state.task = None
            if state.next is not None and not loop.is_closed():
                self._start(loop, state)
