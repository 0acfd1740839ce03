"""Run calls at once on threads of their own: each under a time limit, the caller's context in each.

Every fan-out goes through ``run_each`` so each gets the same things right: the caller's ``ContextVar``s (the
request id) go along; a thread closes its database connections before it reports back (the caller may drop the
database next); an overrun call is reported unfinished and left to run, since Python cannot stop a thread (work
given a limit must be safe to overlap a later run); a call's exception is its outcome, never raised here.
"""

from __future__ import annotations

import contextvars
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import cast

from django.db import connections


@dataclass(frozen=True)
class Outcome[T, R]:
    """What became of one call: its value, the exception it raised, or that it was still running."""

    item: T
    value: R | None = None
    error: Exception | None = None
    finished: bool = True  # False: still running when its time limit came

    @property
    def ok(self) -> bool:
        return self.finished and self.error is None

    def result(self) -> R:
        """The call's value; raises what the call raised, or ``TimeoutError`` if it was still running."""
        if self.error is not None:
            raise self.error
        if not self.finished:
            raise TimeoutError("the call was still running at its time limit")
        return cast(R, self.value)


class _Interrupted(Exception):
    """A call that ended by a BaseException (SystemExit in its thread): it still reports back."""


def run_each[T, R](
    items: Sequence[T],
    work: Callable[[T], R],
    *,
    limit_s: float | None = None,
    max_threads: int | None = None,
    inline: bool = False,
    name: str = "run-each",
    on_done: Callable[[Outcome[T, R]], None] | None = None,
    heartbeat: Callable[[], None] | None = None,
    heartbeat_s: float = 1.0,
) -> list[Outcome[T, R]]:
    """``work(item)`` for every item at once; their outcomes, in the order of ``items``.

    ``limit_s``: each call's limit from its start (None: none); a call past it is reported ``finished=False`` and
    no longer counts against ``max_threads`` (None: a thread per item), so a stuck call holds back no other.
    ``on_done`` gets each outcome in the caller's thread as it comes; ``heartbeat`` runs every ``heartbeat_s``
    while the caller waits; what either raises is raised here, the calls left to run. ``inline``: every call in
    this thread, in order, with no limit and the caller's own connections (for work that must see the rows of a
    transaction the caller holds open).
    """
    if inline:
        outcomes = []
        for item in items:
            outcome = _attempt(item, work)
            if on_done is not None:
                on_done(outcome)
            outcomes.append(outcome)
        return outcomes
    return _Run(items, work, limit_s, max_threads or len(items), name, on_done, heartbeat, heartbeat_s).wait()


def _attempt[T, R](item: T, work: Callable[[T], R]) -> Outcome[T, R]:
    try:
        return Outcome(item, value=work(item))
    except Exception as exc:  # every call reports, whatever it raised; the caller judges it
        return Outcome(item, error=exc)


class _Run[T, R]:
    """One ``run_each`` over threads: the caller's thread starts calls, waits, and collects."""

    def __init__(
        self,
        items: Sequence[T],
        work: Callable[[T], R],
        limit_s: float | None,
        max_threads: int,
        name: str,
        on_done: Callable[[Outcome[T, R]], None] | None,
        heartbeat: Callable[[], None] | None,
        heartbeat_s: float,
    ) -> None:
        self.items, self.work, self.limit_s, self.max_threads = items, work, limit_s, max(1, max_threads)
        self.name, self.on_done, self.heartbeat, self.heartbeat_s = name, on_done, heartbeat, heartbeat_s
        self.done: queue.Queue[tuple[int, Outcome[T, R]]] = queue.Queue()
        self.outcomes: dict[int, Outcome[T, R]] = {}
        self.running: dict[int, float] = {}  # index -> when its limit passes (inf: no limit)
        self.next_index = 0

    def wait(self) -> list[Outcome[T, R]]:
        next_beat = time.monotonic() + self.heartbeat_s
        while True:
            while self.next_index < len(self.items) and len(self.running) < self.max_threads:
                self._start(self.next_index)
                self.next_index += 1
            if not self.running:
                break
            now = time.monotonic()
            until = min(self.running.values())
            if self.heartbeat is not None:
                until = min(until, next_beat)
            try:
                index, outcome = self.done.get(timeout=None if until == float("inf") else max(0.0, until - now))
            except queue.Empty:
                pass
            else:
                if index in self.running:  # else it was reported as overrun already
                    del self.running[index]
                    self._report(index, outcome)
            self._overruns()
            if self.heartbeat is not None and time.monotonic() >= next_beat:
                self.heartbeat()
                next_beat = time.monotonic() + self.heartbeat_s
        return [self.outcomes[i] for i in range(len(self.items))]

    def _start(self, index: int) -> None:
        limit = float("inf") if self.limit_s is None else time.monotonic() + self.limit_s
        self.running[index] = limit
        context = contextvars.copy_context()
        threading.Thread(
            target=context.run, args=(self._in_thread, index), name=f"{self.name}-{index}", daemon=True
        ).start()

    def _in_thread(self, index: int) -> None:
        item = self.items[index]
        outcome: Outcome[T, R] = Outcome(item, error=_Interrupted("the call ended without an answer"))
        try:
            outcome = _attempt(item, self.work)
        finally:
            # Closed before anyone hears this call is done: the caller may go on to drop the
            # database, which PostgreSQL refuses while a connection to it is open.
            connections.close_all()
            self.done.put((index, outcome))

    def _overruns(self) -> None:
        now = time.monotonic()
        for index in sorted(i for i, limit in self.running.items() if limit <= now):
            del self.running[index]
            self._report(index, Outcome(self.items[index], finished=False))

    def _report(self, index: int, outcome: Outcome[T, R]) -> None:
        self.outcomes[index] = outcome
        if self.on_done is not None:
            self.on_done(outcome)
