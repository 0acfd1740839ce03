"""What a tool may ask of the framework: who is calling, a way to run sync services, and what to name in errors.

The agent comes from the verified bearer token, never from a tool argument. ``run_db`` runs sync code (ORM, ZVM
client) on a small pool of its own: Django's ``sync_to_async`` would put every call of the process on one shared
thread (measured: see the benchmarks page). ``run_quick`` gives single short queries a lane of their own, so a
call answered from caches never waits behind threads waiting for a ZVM's request cap. ``run_db_retried`` retries
work safe to repeat while the database does not answer; ``call_refers_to`` names what a call created, so an
error it ends in afterwards still lets the agent find it.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import select
import time
import weakref
from collections.abc import Awaitable, Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, TypeVar

from django.conf import settings
from django.db import DatabaseError, InterfaceError, OperationalError, connections
from mcp.server.auth.middleware.auth_context import get_access_token

from rewind.lib.errors import PermissionDeniedError

logger = logging.getLogger(__name__)
T = TypeVar("T")

# ZVM calls block on I/O, so a few more threads than cores pay off; each holds a DB connection.
POOL_SIZE = 8
_pool = ThreadPoolExecutor(max_workers=POOL_SIZE, thread_name_prefix="rewind-mcp")
# A lane of its own for single short queries that never call a ZVM (``run_quick``): under load
# every thread of the pool may wait seconds for a ZVM's request cap (guards looking their VMs
# up), and a call answered from caches must not queue behind them for the one query it needs.
_quick_lane = ThreadPoolExecutor(max_workers=2, thread_name_prefix="rewind-mcp-quick")


def current_agent_name() -> str:
    """The calling agent's name. Raises ``PermissionDeniedError`` outside an authenticated call."""
    token = get_access_token()
    if token is None:
        raise PermissionDeniedError("this call carries no verified agent token")
    return token.client_id


def current_agent_id() -> int:
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
            _health_checked_by_its_socket(conn)


def _health_checked_by_its_socket(conn: Any) -> None:
    """Check a reused PostgreSQL connection without the ``SELECT 1`` Django would send first (with
    CONN_HEALTH_CHECKS, a round trip per call: measured, see the benchmarks page). A server that ended the
    connection has said so by then, so an idle connection with anything to read is closed and one with nothing
    is sound."""
    if conn.vendor != "postgresql" or not conn.health_check_enabled or conn.health_check_done:
        return
    if conn.connection is None:
        return
    try:
        readable, _, _ = select.select([conn.connection.fileno()], [], [], 0)
    except (OSError, ValueError, DatabaseError):
        return  # closed under us: Django's own check decides
    if readable:
        conn.close()
    else:
        conn.health_check_done = True


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


# What a database that does not answer raises (a refused or broken connection); a retry after
# closing the connection may succeed.
DATABASE_DOWN = (OperationalError, InterfaceError)
_FIRST_PAUSE_S, _MAX_PAUSE_S = 0.2, 2.0


def database_retried(fn: Callable[[], T], what: str) -> T:
    """``fn()``, tried again on a new connection while the database does not answer, for up to
    ``REWIND_DB_RETRY_S``; then raises what the last try raised. Only for work safe to repeat."""
    deadline = time.monotonic() + float(settings.REWIND_DB_RETRY_S)
    pause = _FIRST_PAUSE_S
    while True:
        try:
            return fn()
        except DATABASE_DOWN as exc:
            if time.monotonic() + pause > deadline:
                raise
            logger.warning("%s: the database did not answer (%s); trying again in %.1f s", what, exc, pause)
            for conn in connections.all(initialized_only=True):
                if not conn.in_atomic_block:
                    conn.close()
            time.sleep(pause)
            pause = min(_MAX_PAUSE_S, pause * 2)


async def run_db(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run ``fn(*args, **kwargs)`` on the MCP thread pool; context vars (agent, request id) follow."""
    return await _run_on(_pool, fn, args, kwargs)


async def run_quick(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``run_db`` for one short query that never calls a ZVM (a token, the sites' fingerprint)."""
    return await _run_on(_quick_lane, fn, args, kwargs)


async def _run_on(
    executor: ThreadPoolExecutor, fn: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> T:
    loop = asyncio.get_running_loop()
    ctx = contextvars.copy_context()
    call = functools.partial(ctx.run, _run_in_thread, fn, args, kwargs)
    return await loop.run_in_executor(executor, call)


async def run_db_retried(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``run_db`` for work safe to repeat, tried again while the database does not answer (``database_retried``)."""
    name = getattr(fn, "__name__", "a call")
    return await run_db(database_retried, functools.partial(fn, *args, **kwargs), name)


# -- what a call refers to ----------------------------------------------------------------------
_refs: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar("rewind_mcp_call_refs", default=None)


@contextmanager
def call_refs() -> Iterator[dict[str, str]]:
    """For the framework: collect what the call running inside refers to (``call_refers_to``)."""
    refs: dict[str, str] = {}
    token = _refs.set(refs)
    try:
        yield refs
    finally:
        _refs.reset(token)


def call_refers_to(**refs: object) -> None:
    """Name what this call created or acts on, e.g. ``guard=12, change_id="chg-1"`` (None values skipped); the dict
    is shared by the call's copied contexts, so ``run_db`` threads may name things too."""
    current = _refs.get()
    if current is not None:
        current.update({key: str(value) for key, value in refs.items() if value is not None})


def refs_sentence(refs: dict[str, str]) -> str:
    """What an error says about the call's records, "" when it named none."""
    guard, change = refs.get("guard"), refs.get("change_id")
    if guard is None and change is None:
        return ""
    parts = []
    if guard is not None:
        parts.append(f"guard #{guard} (zerto_checkpoint_status with id {guard} tells its outcome)")
    if change is not None:
        parts.append(f"change_id {change} (call again with it to get the same guard, never a second checkpoint)")
    return "This call refers to " + " and ".join(parts) + "."


# -- writes committed with the call's audit row --------------------------------------------------
_with_record: contextvars.ContextVar[list[Callable[[], None]] | None] = contextvars.ContextVar(
    "rewind_mcp_with_record", default=None
)


@contextmanager
def writes_with_record() -> Iterator[list[Callable[[], None]]]:
    """For the framework: collect the writes the call running inside leaves for its audit row's transaction."""
    writes: list[Callable[[], None]] = []
    token = _with_record.set(writes)
    try:
        yield writes
    finally:
        _with_record.reset(token)


async def commit_with_record(fn: Callable[[], None]) -> None:
    """Run the write ``fn`` in the transaction that commits this call's audit row (one transaction less). The
    call's answer waits for that commit and fails with it, so ``fn`` is as durable as a write of its own; it
    must be safe to repeat (the writer retries). Outside a call of the framework it runs now."""
    writes = _with_record.get()
    if writes is None:
        await run_db(fn)
    else:
        writes.append(fn)


class _ReadState[K, V]:
    """One event loop's reads: the one running and the one callers are joining, with the keys they want."""

    def __init__(self) -> None:
        self.next: asyncio.Future[Mapping[K, V]] | None = None  # not started yet; callers arriving now join it
        self.keys: set[K] = set()  # what the callers of ``next`` want read
        self.task: asyncio.Task[None] | None = None  # running now


class SharedReads[K, V]:
    """``await read(key)``: ``fn(keys)[key]`` (one short query for many keys) as read after the await began.

    Callers arriving while a read runs wait for the next, which reads all their keys at once: under load one
    thread hand-off and one statement answer many calls, and no caller gets a value read before its call began.
    ``fn`` must answer every key; ``run`` is how it runs off the event loop (``run_quick`` by default).
    """

    def __init__(
        self,
        fn: Callable[[frozenset[K]], Mapping[K, V]],
        run: Callable[..., Awaitable[Mapping[K, V]]] | None = None,
    ) -> None:
        self._fn = fn
        self._run = run or run_quick
        self._states: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _ReadState[K, V]] = (
            weakref.WeakKeyDictionary()
        )

    async def __call__(self, key: K) -> V:
        loop = asyncio.get_running_loop()
        state = self._states.get(loop)
        if state is None:
            state = self._states[loop] = _ReadState()
        future = state.next
        if future is None:
            future = state.next = loop.create_future()
        state.keys.add(key)
        if state.task is None:
            self._start(loop, state)
        # shield: one caller going away must not cancel the read the others wait for
        return (await asyncio.shield(future))[key]

    def _start(self, loop: asyncio.AbstractEventLoop, state: _ReadState[K, V]) -> None:
        future, keys = state.next, frozenset(state.keys)
        state.next, state.keys = None, set()
        assert future is not None
        state.task = loop.create_task(self._read(loop, state, future, keys))

    async def _read(
        self,
        loop: asyncio.AbstractEventLoop,
        state: _ReadState[K, V],
        future: asyncio.Future[Mapping[K, V]],
        keys: frozenset[K],
    ) -> None:
        try:
            values = await self._run(self._fn, keys)
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
                future.set_result(values)
        finally:
            state.task = None
            if state.next is not None and not loop.is_closed():
                self._start(loop, state)


class SharedRead[V]:
    """``await read()``: ``fn()`` (one short query, on a thread of its own) as read after the await began;
    ``SharedReads`` with one key, so callers that arrive while a read is running share the next one."""

    def __init__(self, fn: Callable[[], V]) -> None:
        self._reads: SharedReads[None, V] = SharedReads(lambda _keys: {None: fn()})

    async def __call__(self) -> V:
        return await self._reads(None)
