"""A forwarded ``tools/call`` posted by the gateway itself; the SDK's session decides everything around it.

Why: below the SDK client's session, each request crosses its JSON-RPC dispatcher (a memory
stream and a waiter per request), its streamable HTTP transport (a task per POST) and an httpx
client (building the request, merging headers, auth and redirect flows), and those layers were
the largest part of what the gateway's client spent per forwarded call (``bench/relay.py``
measures the SDK's path and this one side by side, with the same session above them).

So a link's session stays the SDK's ``ClientSession`` for all that it decides: the stamp of each
request (its ``_meta`` and ``Mcp-*`` headers, ``Mcp-Param-*`` from the tool's listing), checking
the result against the negotiated revision and the tool's output schema, the re-list and resend
after ``HEADER_MISMATCH``, ``InputRequiredResult`` rounds. ``RelayingDispatcher`` stands in for the
session's dispatcher: a ``tools/call`` on a 2026-07-28 session is posted here on the link's own
kept-alive connections (``rewind.gateway.wire``), every other message goes to the SDK's dispatcher.

What the POST and its answer get, as the SDK's transport gives them:
- the upstream's headers and the httpx client's defaults, ``Accept``/``Content-Type`` of the
  streamable HTTP transport, then the stamp's headers; the request's ``_meta`` with a progress
  token (the request id) when a progress callback is given, and the W3C trace context;
- an answer in JSON or as an SSE stream: progress notifications for this call reach the callback;
  the first response or error in the stream is the answer; other notifications and any request
  from the server (none is allowed on a 2026-07-28 connection) are dropped;
- 202 is ``INVALID_REQUEST``; a status of 400 and over is the JSON-RPC error in its body when there
  is one, else ``METHOD_NOT_FOUND`` for 404 and ``INTERNAL_ERROR`` for the rest; a redirect, which
  the SDK follows within the origin, is handed to the SDK's dispatcher (nothing ran there);
- a stream that ends or breaks before its answer, after an event with an id, is resumed as the
  SDK's transport resumes it: a GET with ``Last-Event-ID`` after the server's ``retry`` (1 s when
  it gave none), again each time a resumed stream ends without the answer, and given up after two
  GETs in a row that fail (not 2xx, not a stream, no connection: ``CONNECTION_CLOSED``). A redirect
  answering the GET is such a failure here (the SDK follows one within the origin). A stream
  without an id is not resumable: ending, it is ``CONNECTION_CLOSED`` ("may have run"); breaking,
  it raises httpx's error;
- the session's read timeout is ``REQUEST_TIMEOUT``, and the POST is dropped (closing its
  connection: the 2026-07-28 wire's cancellation), as it is when the caller is cancelled;
- a connection that cannot be opened, or breaks, raises httpx's own error, as the SDK's would.

Not relayed: the handshake-era revisions (2025-11-25 and before: a session id, server requests
that need an answer, the courtesy cancellation); they go through the SDK's dispatcher and transport.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, NamedTuple

import httpx2
from mcp.client.streamable_http import DEFAULT_RECONNECTION_DELAY_MS, LAST_EVENT_ID, MAX_RECONNECTION_ATTEMPTS
from mcp.shared._otel import inject_trace_context
from mcp.shared.dispatcher import CallOptions, ProgressFnT
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp_types import JSONRPCError, JSONRPCNotification, JSONRPCResponse, jsonrpc_message_adapter
from mcp_types.jsonrpc import (
    CONNECTION_CLOSED,
    INTERNAL_ERROR,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    REQUEST_TIMEOUT,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from rewind.gateway.wire import KeptAliveTransport

logger = logging.getLogger(__name__)

RELAYED_METHOD = "tools/call"
MAX_SSE_EVENT_BYTES = 1024 * 1024  # the SDK transport's own bound on one event
# The streamable HTTP transport's own headers on every POST (its ``_prepare_headers``).
_TRANSPORT_HEADERS = (("accept", "application/json, text/event-stream"), ("content-type", "application/json"))
# What a GET resuming a stream adds (the SDK's ``sse_within_origin``; its Accept is overridden).
_RESUME_HEADERS = (("cache-control", "no-store"),)

ResponseHook = Callable[[httpx2.Response], Awaitable[None]]


class _Redirected(Exception):
    """The upstream redirected the POST: nothing ran there, and the SDK knows which redirects to follow."""


class _Cut(NamedTuple):
    """A stream that ended or broke before its answer, after an event with an id: where to resume."""

    last_event_id: str
    retry_ms: int | None


Answer = JSONRPCResponse | JSONRPCError


class Relay:
    """Posts one upstream's ``tools/call`` requests on its kept-alive connections (see the module)."""

    def __init__(
        self, url: str, http: httpx2.AsyncClient, transport: KeptAliveTransport, on_response: ResponseHook
    ) -> None:
        self._url = url
        own = {name for name, _ in _TRANSPORT_HEADERS}
        # The httpx client's headers (the upstream's credentials and httpx's defaults), as the SDK's
        # POST gets them, worked out once instead of merged on every request.
        self._headers = [(k, v) for k, v in http.headers.items() if k not in own] + list(_TRANSPORT_HEADERS)
        self._timeouts = http.timeout.as_dict()
        self._transport = transport
        self._on_response = on_response
        self._ids = itertools.count(1)
        self.relayed = 0  # calls posted here, for the tests and the benchmark

    async def tool_call(self, params: Mapping[str, Any] | None, opts: CallOptions) -> dict[str, Any]:
        """What the SDK's dispatcher returns for the request: its result; raises ``MCPError`` as it does."""
        request_id = f"relay-{next(self._ids)}"  # never an integer: the SDK's dispatcher mints those
        on_progress = opts.get("on_progress")
        request = self._request(request_id, params, opts, with_progress=on_progress is not None)
        self.relayed += 1
        try:
            async with asyncio.timeout(opts.get("timeout")):
                answer = await self._exchange(request, request_id, on_progress)
        except TimeoutError:
            raise MCPError(code=REQUEST_TIMEOUT, message=f"Request {RELAYED_METHOD!r} timed out") from None
        if isinstance(answer, JSONRPCError):
            raise MCPError(code=answer.error.code, message=answer.error.message, data=answer.error.data)
        return answer.result

    def _request(
        self, request_id: str, params: Mapping[str, Any] | None, opts: CallOptions, *, with_progress: bool
    ) -> httpx2.Request:
        out = dict(params or {})
        meta = dict(out.get("_meta") or {})
        if with_progress:
            meta["progressToken"] = request_id
        inject_trace_context(meta)
        if meta:
            out["_meta"] = meta
        else:
            out.pop("_meta", None)
        message = {"jsonrpc": "2.0", "id": request_id, "method": RELAYED_METHOD, "params": out}
        body = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode()
        stamped = [(k.lower(), v) for k, v in (opts.get("headers") or {}).items()]
        overridden = {k for k, _ in stamped}
        headers = [(k, v) for k, v in self._headers if k not in overridden] + stamped
        return httpx2.Request("POST", self._url, headers=headers, content=body, extensions={"timeout": self._timeouts})

    async def _exchange(self, request: httpx2.Request, request_id: str, on_progress: ProgressFnT | None) -> Answer:
        response = await self._transport.handle_async_request(request)
        response.request = request
        try:
            await self._on_response(response)
            status = response.status_code
            kind = response.headers.get("content-type", "").lower()
            if status == 202:
                return _error(request_id, INVALID_REQUEST, "server answered a request with 202 Accepted")
            if 300 <= status < 400:
                raise _Redirected
            if status >= 400:
                return await _error_status(response, request_id, kind)
            if kind.startswith("application/json"):
                return _answer(await response.aread(), request_id, "JSON response")
            if not kind.startswith("text/event-stream"):
                return _error(request_id, INVALID_REQUEST, f"Unexpected content type: {kind}")
            answer = await _read_stream(response, request_id, on_progress)
        finally:
            await response.aclose()
        if isinstance(answer, _Cut):
            return await self._resume(answer, request, request_id, on_progress)
        return answer

    async def _resume(
        self, cut: _Cut, post: httpx2.Request, request_id: str, on_progress: ProgressFnT | None
    ) -> Answer:
        """The rest of a cut stream, read from GETs with ``Last-Event-ID`` as the SDK's transport reads it."""
        failed = 0
        while failed < MAX_RECONNECTION_ATTEMPTS:
            delay_ms = cut.retry_ms if cut.retry_ms is not None else DEFAULT_RECONNECTION_DELAY_MS
            await asyncio.sleep(delay_ms / 1000)
            request = self._resume_request(post, cut.last_event_id)
            try:
                response = await self._transport.handle_async_request(request)
            except httpx2.TransportError as exc:
                logger.info("relay: resuming a stream failed: %r", exc)
                failed += 1
                continue
            response.request = request
            try:
                await self._on_response(response)
                if not response.is_success or not _is_stream(response):
                    failed += 1
                    continue
                outcome = await _read_stream(response, request_id, on_progress, cut)
            finally:
                await response.aclose()
            if not isinstance(outcome, _Cut):
                return outcome
            cut, failed = outcome, 0  # it ended again on a new id: resumed from there, as the SDK does
        return _error(request_id, CONNECTION_CLOSED, "SSE stream ended and reconnection attempts were exhausted")

    def _resume_request(self, post: httpx2.Request, last_event_id: str) -> httpx2.Request:
        version = post.headers.get(MCP_PROTOCOL_VERSION_HEADER)
        headers = [*self._headers, *_RESUME_HEADERS, (LAST_EVENT_ID, last_event_id)]
        if version:
            headers.append((MCP_PROTOCOL_VERSION_HEADER.lower(), version))
        return httpx2.Request("GET", self._url, headers=headers, extensions={"timeout": self._timeouts})


def _error(request_id: str, code: int, message: str) -> JSONRPCError:
    return JSONRPCError.model_validate(
        {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}
    )


def _answer(data: bytes | str, request_id: str, what: str) -> JSONRPCResponse | JSONRPCError:
    try:
        message = jsonrpc_message_adapter.validate_json(data, by_name=False)
    except ValidationError as exc:
        return _error(request_id, PARSE_ERROR, f"Failed to parse {what}: {exc}")
    if isinstance(message, JSONRPCResponse | JSONRPCError):
        return message
    return _error(request_id, PARSE_ERROR, f"Failed to parse {what}: not a response")


async def _error_status(response: httpx2.Response, request_id: str, kind: str) -> JSONRPCError:
    """A status of 400 and over, read as the SDK's transport reads it."""
    if kind.startswith("application/json"):
        try:
            parsed = jsonrpc_message_adapter.validate_json(await response.aread(), by_name=False)
        except (httpx2.StreamError, ValidationError):
            parsed = None
        if isinstance(parsed, JSONRPCError):
            return JSONRPCError(jsonrpc="2.0", id=request_id, error=parsed.error)
    if response.status_code == 404:  # a 2026-07-28 session has no id: 404 is the method's
        return _error(request_id, METHOD_NOT_FOUND, "Not Found")
    return _error(request_id, INTERNAL_ERROR, "Server returned an error response")


def _is_stream(response: httpx2.Response) -> bool:
    return response.headers.get("content-type", "").lower().startswith("text/event-stream")


async def _read_stream(
    response: httpx2.Response, request_id: str, on_progress: ProgressFnT | None, resumed: _Cut | None = None
) -> Answer | _Cut:
    """The stream's answer, or where to resume it (``resumed``: where this stream was resumed from)."""
    last_id, retry_ms = resumed or (None, None)
    try:
        async for event in httpx2.EventSource(response, max_event_size=MAX_SSE_EVENT_BYTES):
            last_id = event.id or last_id
            retry_ms = event.retry if event.retry is not None else retry_ms
            if event.event != "message" or not event.data:
                continue  # another kind of event, or a priming event (its id is kept above)
            try:
                message = jsonrpc_message_adapter.validate_json(event.data, by_name=False)
            except ValidationError as exc:
                return _error(request_id, PARSE_ERROR, f"Failed to parse SSE message: {exc}")
            if isinstance(message, JSONRPCResponse | JSONRPCError):
                return message  # the POST's stream answers this request, whatever id it quotes
            if isinstance(message, JSONRPCNotification) and message.method == "notifications/progress":
                await _progress(message.params or {}, request_id, on_progress)
            else:
                logger.debug("relay: dropped %s from the upstream's stream", getattr(message, "method", "a message"))
    except httpx2.SSEError as exc:
        return _error(request_id, CONNECTION_CLOSED, f"SSE stream failed: {exc}")
    except httpx2.TransportError:
        if last_id is None:
            raise  # broken, and not resumable: the caller's "may have run"
        logger.info("relay: a stream broke before its answer; it is resumed after event %s", last_id)
    if last_id is not None:
        return _Cut(last_id, retry_ms)  # a resumed stream that ended on no new event is resumed again
    return _error(request_id, CONNECTION_CLOSED, "SSE stream ended without a response")


async def _progress(params: Mapping[str, Any], request_id: str, on_progress: ProgressFnT | None) -> None:
    """A progress notification for this request, checked as the SDK's dispatcher checks it."""
    progress, total, message = params.get("progress"), params.get("total"), params.get("message")
    if on_progress is None or params.get("progressToken") != request_id:
        return
    if isinstance(progress, bool) or not isinstance(progress, int | float):
        return
    try:
        await on_progress(
            float(progress),
            float(total) if isinstance(total, int | float) and not isinstance(total, bool) else None,
            message if isinstance(message, str) else None,
        )
    except Exception:  # the SDK's dispatcher shields the callback the same way
        logger.exception("progress callback raised")


class RelayingDispatcher:
    """A session's dispatcher whose 2026-07-28 ``tools/call`` goes to a ``Relay``; the rest to the SDK's own.

    Attributes are read from and written to the SDK's dispatcher, so the session and the link
    (which reads whether it closed) see the one they built.
    """

    def __init__(self, inner: Any, relay: Relay) -> None:
        object.__setattr__(self, "_inner", inner)
        object.__setattr__(self, "relay", relay)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._inner, name, value)

    async def send_raw_request(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        opts = opts or {}
        version = (opts.get("headers") or {}).get(MCP_PROTOCOL_VERSION_HEADER)
        if method != RELAYED_METHOD or kwargs or version not in MODERN_PROTOCOL_VERSIONS or "resumption_token" in opts:
            return await self._inner.send_raw_request(method, params, opts, **kwargs)
        if getattr(self._inner, "_closed", False):
            raise MCPError(code=CONNECTION_CLOSED, message="Connection closed")
        try:
            return await self.relay.tool_call(params, opts)
        except _Redirected:
            return await self._inner.send_raw_request(method, params, opts)
