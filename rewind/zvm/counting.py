"""Counting every request sent to a ZVM, by site and result, for the service's metrics.

``Transport.send`` reports each request once (a retry is another; a call an open circuit refused is none) to the
``RequestCounter`` it was handed, if any. A counter swallows its store's errors: counting never fails a call.
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
