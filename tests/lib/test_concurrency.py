"""``rewind.lib.concurrency.run_each`` on real threads: order, failures, time limits, context, connections."""

from __future__ import annotations

import threading
import time
from contextvars import ContextVar
from typing import Any

import pytest
from django.db import connections

from rewind.lib.concurrency import Outcome, run_each
from rewind.lib.requestid import bound_request_id, current_request_id

GENEROUS_S = 30.0  # only ever a bound on a wait that should end at once
_flavour: ContextVar[str] = ContextVar("test_flavour", default="none")


def test_it_returns_outcomes_in_the_order_of_the_items_whatever_order_they_end_in() -> None:
    gates = [threading.Event() for _ in range(3)]

    def work(i: int) -> int:
        # Each call waits for the one after it, so they end last to first.
        if i < 2:
            assert gates[i + 1].wait(GENEROUS_S)
        gates[i].set()
        return i * 10

    ended: list[int] = []
    outcomes = run_each([0, 1, 2], work, on_done=lambda o: ended.append(o.item))

    assert [o.value for o in outcomes] == [0, 10, 20]
    assert [o.item for o in outcomes] == [0, 1, 2]
    assert all(o.ok for o in outcomes)
    assert ended == [2, 1, 0]


def test_it_makes_an_exception_the_outcome_of_its_call_only() -> None:
    def work(i: int) -> int:
        if i == 1:
            raise ValueError("broken")
        return i

    outcomes = run_each([0, 1, 2], work)

    assert [o.value for o in outcomes] == [0, None, 2]
    assert isinstance(outcomes[1].error, ValueError)
    assert not outcomes[1].ok
    with pytest.raises(ValueError, match="broken"):
        outcomes[1].result()
    assert outcomes[2].result() == 2


def test_it_reports_a_call_past_its_limit_as_unfinished_and_leaves_it_running() -> None:
    release, ended = threading.Event(), threading.Event()

    def work(i: int) -> str:
        if i == 0:
            release.wait(GENEROUS_S)
            ended.set()
            return "late"
        return "on time"

    reported: list[Outcome[int, str]] = []
    started = time.monotonic()
    outcomes = run_each([0, 1], work, limit_s=0.2, on_done=reported.append)

    assert time.monotonic() - started < GENEROUS_S / 2
    assert not release.is_set()
    assert not ended.is_set()
    assert not outcomes[0].finished
    assert outcomes[0].error is None
    with pytest.raises(TimeoutError):
        outcomes[0].result()
    assert outcomes[1].ok
    assert outcomes[1].value == "on time"
    assert [o.item for o in reported] == [1, 0]
    release.set()
    assert ended.wait(GENEROUS_S)  # it was left to finish in its thread


def test_it_runs_at_most_max_threads_at_once_and_an_overrun_call_holds_no_slot() -> None:
    lock, running, peak = threading.Lock(), [0], [0]
    release = threading.Event()

    def work(i: int) -> int:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        try:
            if i == 0:
                release.wait(GENEROUS_S)  # stuck past its limit: the others must still run
            else:
                time.sleep(0.01)  # a call that takes a moment, so that calls overlap: the peak is measured
            return i
        finally:
            with lock:
                running[0] -= 1

    try:
        outcomes = run_each(list(range(6)), work, max_threads=2, limit_s=0.5)
    finally:
        release.set()

    assert not outcomes[0].finished
    assert [o.value for o in outcomes[1:]] == [1, 2, 3, 4, 5]
    # The stuck call and at most two counted ones: its slot was handed on at its limit.
    assert peak[0] <= 3


def test_it_runs_each_call_in_a_copy_of_the_callers_context() -> None:
    def work(i: int) -> tuple[str, str]:
        seen = (_flavour.get(), current_request_id())
        _flavour.set(f"changed in {i}")  # stays in this call's own copy
        return seen

    token = _flavour.set("vanilla")
    try:
        with bound_request_id("req-0123456789") as rid:
            outcomes = run_each([1, 2], work)
        assert [o.value for o in outcomes] == [("vanilla", rid), ("vanilla", rid)]
        assert _flavour.get() == "vanilla"
    finally:
        _flavour.reset(token)


def test_it_calls_the_heartbeat_while_it_waits() -> None:
    beat = threading.Event()

    # The call ends only once the heartbeat has run in the waiting caller.
    outcomes = run_each([0, 1], lambda i: beat.wait(GENEROUS_S), heartbeat=beat.set, heartbeat_s=0.01)

    assert [o.value for o in outcomes] == [True, True]


@pytest.mark.django_db(transaction=True)
def test_it_closes_the_database_connections_of_its_threads() -> None:
    opened: list[Any] = []

    def work(i: int) -> int:
        conn = connections["default"]  # this thread's own connection
        with conn.cursor() as cursor:
            cursor.execute("SELECT %s", [i])
            (value,) = cursor.fetchone()
        opened.append((conn, threading.get_ident()))
        return int(value)

    outcomes = run_each([1, 2, 3], work)

    assert [o.value for o in outcomes] == [1, 2, 3]
    assert len(opened) == 3
    assert all(ident != threading.get_ident() for _conn, ident in opened)
    assert all(conn.connection is None for conn, _ident in opened)


@pytest.mark.django_db
def test_it_runs_inline_in_the_callers_thread_without_closing_its_connection() -> None:
    caller = threading.get_ident()

    def work(i: int) -> int:
        assert threading.get_ident() == caller
        time.sleep(0.01)  # past the limit, which inline calls do not have
        with connections["default"].cursor() as cursor:
            cursor.execute("SELECT %s", [i])
            return int(cursor.fetchone()[0])

    outcomes = run_each([1, 2], work, inline=True, limit_s=0.001)

    assert [o.value for o in outcomes] == [1, 2]
    assert all(o.finished for o in outcomes)
    assert connections["default"].connection is not None  # the caller's, still in its transaction


def test_it_returns_nothing_for_no_items() -> None:
    assert run_each([], lambda i: i) == []
