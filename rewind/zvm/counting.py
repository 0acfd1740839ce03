"""Counting every request sent to a ZVM, by site and result, for the service's metrics.

``Transport.send`` reports each request once (a retry is another request; a call refused by
an open circuit sends nothing and is not one) to the ``RequestCounter`` it was handed. The
counters that every process shares (Redis, the database) live outside the client library;
without one nothing is counted. Counting must never fail or delay a ZVM call beyond its own
short store write, so a counter swallows its store's errors.
"""

from __future__ import annotations

from typing import Protocol

from .errors import ZvmError, ZvmTlsError, ZvmTransientError

# The results a request can have: its answer's status class, or why there was none.
ANSWERED = ("2xx", "3xx", "4xx", "5xx")
NO_ANSWER = ("timeout", "connect_error", "tls_error", "error")


class RequestCounter(Protocol):
    def count(self, site: str, result: str) -> None:
        """Count one request to the ZVM of ``site`` with ``result`` (one of ANSWERED or NO_ANSWER)."""
        ...


def answered(status: int) -> str:
    return f"{min(max(status // 100, 2), 5)}xx"  # 1xx never reaches us; anything odd counts with its neighbour


def no_answer(error: ZvmError) -> str:
    if error.timed_out:
        return "timeout"
    if isinstance(error, ZvmTlsError):
        return "tls_error"
    if isinstance(error, ZvmTransientError):
        return "connect_error"
    return "error"
