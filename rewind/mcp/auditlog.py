"""The audit row of every MCP tool call, written by one thread per process in small batches.

Not one ``audit_record`` transaction per call: on SQLite threads waiting for the write lock sleep in its busy
handler, a long latency tail under load, and a transaction per row halved the endpoint's throughput. One writer
thread never contends with itself, and appends a batch with one insert; each caller still waits until its own
row is committed (fail-closed). While other calls are running, their rows are milliseconds away, so the writer
waits up to GATHER_WINDOW_S for them before it commits; a lone call waits for nothing. Measured: see the
benchmarks page.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from django.db import connections, transaction

from rewind.audit import Actor, AuditEntry, audit_append
from rewind.mcp.context import database_retried, recycle_connections

logger = logging.getLogger(__name__)
MAX_BATCH = 64
GATHER_WINDOW_S = 0.002


@dataclass
class _Pending:
    actor: Actor
    action: str
    target: tuple[str, str]
    data: dict[str, Any]
    request_id: str
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[None]
    also: tuple[Callable[[], None], ...] = ()


@dataclass
class _CloseConnections:
    done: threading.Event


def _settle_all(outcomes: list[tuple[asyncio.Future[None], BaseException | None]]) -> None:
    for future, error in outcomes:
        if future.done():
            continue  # the caller went away (cancelled); nothing to tell
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)


class AuditWriter:
    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[_Pending | _CloseConnections] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._running = 0  # tool calls between start and their record(): rows on the way
        self._running_lock = threading.Lock()

    @contextmanager
    def call_running(self) -> Iterator[None]:
        """Wrap a tool call's own work (not its ``record``): tells the writer a row is coming."""
        with self._running_lock:
            self._running += 1
        try:
            yield
        finally:
            with self._running_lock:
                self._running -= 1

    async def record(
        self,
        *,
        actor: Actor,
        action: str,
        target: tuple[str, str],
        data: dict[str, Any],
        request_id: str,
        also: tuple[Callable[[], None], ...] = (),
    ) -> None:
        """Return once the event is committed; raise what the database raised otherwise. ``also``: writes committed
        in the row's transaction (``commit_with_record``), safe to repeat (a batch is retried); one that fails
        fails this row alone."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        self._ensure_thread()
        self._queue.put(_Pending(actor, action, target, data, request_id, loop, future, also))
        await future

    def _ensure_thread(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        with self._start_lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="rewind-mcp-audit", daemon=True)
                self._thread.start()

    def close_connections(self, timeout: float = 10.0) -> None:
        """Have the writer thread close its database connections (before a database is dropped)."""
        if self._thread is None or not self._thread.is_alive():
            return
        done = threading.Event()
        self._queue.put(_CloseConnections(done))
        done.wait(timeout)

    def _run(self) -> None:
        while True:
            batch: list[_Pending] = []
            item: _Pending | _CloseConnections | None = self._queue.get()
            deadline: float | None = None
            while item is not None:
                if isinstance(item, _CloseConnections):
                    self._flush(batch)
                    batch = []
                    connections.close_all()
                    item.done.set()
                else:
                    batch.append(item)
                if len(batch) >= MAX_BATCH:
                    break
                if deadline is None:
                    deadline = time.monotonic() + GATHER_WINDOW_S
                item = self._next(bool(batch), deadline)
            self._flush(batch)

    def _next(self, holding: bool, deadline: float) -> _Pending | _CloseConnections | None:
        """The next queued item; when none is queued, wait for one until ``deadline`` only
        while rows are held and other calls are still running. None: commit now."""
        try:
            return self._queue.get_nowait()
        except queue.Empty:
            pass
        remaining = deadline - time.monotonic()
        if not holding or self._running <= 0 or remaining <= 0:
            return None
        try:
            return self._queue.get(timeout=remaining)
        except queue.Empty:
            return None

    def _flush(self, batch: list[_Pending]) -> None:
        if batch:
            self._write(batch)

    def _write(self, batch: list[_Pending]) -> None:
        try:
            recycle_connections()
            # A database that restarts is waited for (REWIND_DB_RETRY_S): its callers wait anyway,
            # and a row that cannot be written fails its call.
            database_retried(
                lambda: _append_committed(batch, lambda: self._report(batch, None)), "the MCP calls' audit rows"
            )
        except Exception:
            connections["default"].close_if_unusable_or_obsolete()
            if len(batch) == 1:
                logger.exception("could not write the audit event of request %s", batch[0].request_id)
                self._report(batch, RuntimeError("the audit event could not be written"))
                return
            # One bad row must not fail the others: write them one by one.
            for item in batch:
                self._write([item])

    @staticmethod
    def _report(batch: list[_Pending], error: BaseException | None) -> None:
        """Wake each event loop once per batch: every wake-up is a write to its self-pipe."""
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[None], BaseException | None]]] = {}
        for item in batch:
            by_loop.setdefault(item.loop, []).append((item.future, error))
        for loop, outcomes in by_loop.items():
            try:
                loop.call_soon_threadsafe(_settle_all, outcomes)
            except RuntimeError:
                pass  # the event loop is closed: the callers are gone


def _append_committed(batch: list[_Pending], committed: Callable[[], None]) -> None:
    """Append ``batch`` to the chain in order, in a transaction of its own, with the writes they carry.
    ``committed`` runs as soon as it commits, before the chaining left for after the commit, which under a burst
    made callers whose rows were safely in wait for other processes' rows."""
    with transaction.atomic():
        transaction.on_commit(committed)  # the first hook: it runs before the chaining's
        for item in batch:
            for write in item.also:
                write()
        audit_append([AuditEntry(i.actor, i.action, i.target, i.data, i.request_id) for i in batch])


audit_writer = AuditWriter()
