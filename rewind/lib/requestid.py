"""One request id ties an HTTP or MCP call to its tasks, ZVM calls and audit events."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from django.http import HttpRequest, HttpResponse

_current: ContextVar[str | None] = ContextVar("rewind_request_id", default=None)
# Accept a caller's id only when it is short and plain, so it is safe in logs and headers.
_ACCEPTABLE = re.compile(r"^[A-Za-z0-9._:-]{8,64}$")
HEADER = "X-Request-ID"


def new_request_id() -> str:
    return uuid.uuid4().hex


def current_request_id() -> str:
    """The bound request id, or a fresh one for work that has none (beat, shell)."""
    return _current.get() or new_request_id()


@contextmanager
def bound_request_id(request_id: str | None) -> Iterator[str]:
    rid = request_id if request_id and _ACCEPTABLE.match(request_id) else new_request_id()
    token = _current.set(rid)
    try:
        yield rid
    finally:
        _current.reset(token)


class RequestIdMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        with bound_request_id(request.headers.get(HEADER)) as rid:
            request.id = rid  # type: ignore[attr-defined]
            response = self.get_response(request)
            response[HEADER] = rid
            return response
