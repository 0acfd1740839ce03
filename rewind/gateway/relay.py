"""A forwarded ``tools/call`` posted by the gateway itself; the SDK's session decides everything around it.

Why: below the SDK client's session, each request crosses its JSON-RPC dispatcher (a memory
stream and a waiter per request), its streamable HTTP transport (a task per POST) and an httpx
client (building the request, merging headers, auth and redirect flows), and those layers were
the largest part of what the gateway's client spent per forwarded call (``bench/relay.py``
measures the SDK's path and this one side by side, with the same session above them).

So a link's session stays the SDK's ``ClientSession`` for all that it decides: the stamp of each
request (its ``_meta`` and ``Mcp-*`` headers, ``Mcp-Param-*`` from the tool's listing), checking
the result against the negotiated revision and the tool's output schema, the re-list and resend
after ``HEADER_MISMATCH``, ``InputRequiredResult`` rounds, answering the server's own requests.
``RelayingDispatcher`` stands in for the session's dispatcher: every ``tools/call`` of an HTTP
session, of any revision, is posted here on the link's own kept-alive connections
(``rewind.gateway.wire``); every other message goes to the SDK's dispatcher.

What the POST and its answer get, as the SDK's transport gives them:
- the upstream's headers and the httpx client's defaults, ``Accept``/``Content-Type`` of the
  streamable HTTP transport, then the stamp's headers, and on a handshake-era session (2025-11-25
  and before) its ``Mcp-Session-Id``, read from the answer to its ``initialize``; the request's
  ``_meta`` with a progress token (the request id) when a progress callback is given, and the W3C
  trace context;
- an answer in JSON or as an SSE stream: progress notifications for this call reach the callback;
  the first response or error in the stream is the answer; every other message (a log line, a
  server's ``ping`` or ``elicitation/create`` on a handshake-era stream) is handed to the SDK's
  dispatcher, which handles it as if its own transport had read it, answering a request on the
  session's own connection. After the answer the stream is read on to its end (at most
  ``END_WAIT_S``, and not again on a link whose server kept one open) so that its connection is
  kept: the SDK's transport closes it at the answer, and pays a new connection per call;
- 202 is ``INVALID_REQUEST``; a status of 400 and over is the JSON-RPC error in its body when there
  is one, else for 404 ``INVALID_REQUEST`` "Session terminated" on a session with an id (the link
  then opens a new one and sends the call again: it did not run) and ``METHOD_NOT_FOUND`` without
  one, and ``INTERNAL_ERROR`` for the rest; a redirect, which the SDK follows within the origin, is
  handed to the SDK's dispatcher (nothing ran there);
- a stream that ends or breaks before its answer, after an event with an id, is resumed as the
  SDK's transport resumes it: a GET with ``Last-Event-ID`` after the server's ``retry`` (1 s when
  it gave none), again each time a resumed stream ends without the answer, and given up after two
  GETs in a row that fail (not 2xx, not a stream, no connection: ``CONNECTION_CLOSED``). A redirect
  answering the GET is such a failure here (the SDK follows one within the origin). A stream
  without an id is not resumable: ending, it is ``CONNECTION_CLOSED`` ("may have run"); breaking,
  it raises httpx's error;
- the session's read timeout is ``REQUEST_TIMEOUT``; then, as when the caller is cancelled, the
  POST is dropped (closing its connection: the 2026-07-28 wire's cancellation) and the SDK's
  dispatcher is told, which sends the courtesy ``notifications/cancelled`` on a handshake-era
  session and nothing on a 2026-07-28 one, as for its own requests;
- a connection that cannot be opened, or breaks, raises httpx's own error, as the SDK's would.

A stdio session's ``tools/call`` goes to a ``PipeRelay``: written as one line to the child's stdin,
its answer and its progress taken out of the child's stdout by the link's own reader of it
(``rewind.gateway.pipes``), which hands every other line to the SDK's dispatcher. As on the SDK's
path: progress reaches the callback in a task of its own; a pipe that closes (the child exited)
fails every call waiting on it with ``CONNECTION_CLOSED``, as does a write the pipe refuses; a
timeout is ``REQUEST_TIMEOUT``, and a call given up, timed out or cancelled, gets the SDK's courtesy
``notifications/cancelled`` through its dispatcher, which writes it to the pipe.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, NamedTuple, Protocol

import anyio
import httpx2
from anyio.abc import ByteSendStream
from mcp.client.streamable_http import DEFAULT_RECONNECTION_DELAY_MS, LAST_EVENT_ID, MAX_RECONNECTION_ATTEMPTS
from mcp.shared._otel import inject_trace_context
from mcp.shared.dispatcher import CallOptions, ProgressFnT
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp.shared.message import SessionMessage
from mcp_types import JSONRPCError, JSONRPCNotification, JSONRPCRequest, JSONRPCResponse, jsonrpc_message_adapter
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
SESSION_HEADER = "mcp-session-id"
ABANDON_S = 5.0  # the SDK dispatcher's own bound on its courtesy cancellation's write
END_WAIT_S = 0.25  # how long an answered stream is read on for its end (``Relay._read_to_the_end``)
_BEFORE_DEADLINE_S = 0.05  # and how long before the call's timeout that stops at the latest
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


class Peer(Protocol):
    """The SDK's side of a relayed call (``RelayingDispatcher``)."""

    async def deliver(self, message: JSONRPCRequest | JSONRPCNotification) -> None:
        """Handle a message of the call's stream that is not its answer or progress, as the SDK would."""

    async def abandon(self, request_id: str, reason: str) -> None:
        """The call was given up (timed out, cancelled): tell the upstream as the SDK's session would."""


class _Call(NamedTuple):
    id: str
    on_progress: ProgressFnT | None
    peer: Peer | None
    deadline: float | None  # the event loop's time at which the call times out


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
        self.session_id: str | None = None  # a handshake-era session's, from its initialize's answer
        self._end_wait_s = END_WAIT_S
        self.relayed = 0  # calls posted here, for the tests and the benchmark

    async def learn_session(self, response: httpx2.Response) -> None:
        """A response hook on the SDK's httpx client: the first session id the upstream gives is the
        session's (the SDK's transport reads it from the answer to ``initialize``, the first request
        that can carry one; a 2026-07-28 server gives none)."""
        if self.session_id is None:
            self.session_id = response.headers.get(SESSION_HEADER) or None

    async def tool_call(
        self, params: Mapping[str, Any] | None, opts: CallOptions, peer: Peer | None = None
    ) -> dict[str, Any]:
        """What the SDK's dispatcher returns for the request: its result; raises ``MCPError`` as it does."""
        timeout = opts.get("timeout")
        deadline = None if timeout is None else asyncio.get_running_loop().time() + timeout
        # The id is never an integer: the SDK's dispatcher mints those for the session's own requests.
        call = _Call(f"relay-{next(self._ids)}", opts.get("on_progress"), peer, deadline)
        request = self._request(call, params, opts)
        self.relayed += 1
        return await _result_of(call, timeout, self._exchange(request, call))

    def _session_headers(self, version: str | None) -> list[tuple[str, str]]:
        if self.session_id is None or version in MODERN_PROTOCOL_VERSIONS:
            return []
        return [(SESSION_HEADER, self.session_id)]

    def takes(self, opts: CallOptions) -> bool:
        """Whether this call is relayed: a stamped one (every HTTP session's, of either era) that asks
        for no resumption, which only the SDK's transport knows how to give."""
        return (opts.get("headers") or {}).get(MCP_PROTOCOL_VERSION_HEADER) is not None and (
            "resumption_token" not in opts
        )

    def _request(self, call: _Call, params: Mapping[str, Any] | None, opts: CallOptions) -> httpx2.Request:
        body = _call_message(call, params).encode()
        stamp = opts.get("headers") or {}
        stamped = [(k.lower(), v) for k, v in stamp.items()]
        overridden = {k for k, _ in stamped}
        headers = [(k, v) for k, v in self._headers if k not in overridden] + stamped
        headers += self._session_headers(stamp.get(MCP_PROTOCOL_VERSION_HEADER))
        return httpx2.Request("POST", self._url, headers=headers, content=body, extensions={"timeout": self._timeouts})

    async def _exchange(self, request: httpx2.Request, call: _Call) -> Answer:
        response = await self._transport.handle_async_request(request)
        response.request = request
        try:
            await self._on_response(response)
            status = response.status_code
            kind = response.headers.get("content-type", "").lower()
            if status == 202:
                return _error(call.id, INVALID_REQUEST, "server answered a request with 202 Accepted")
            if 300 <= status < 400:
                raise _Redirected
            if status >= 400:
                return await _error_status(response, call.id, kind)
            if kind.startswith("application/json"):
                return _answer(await response.aread(), call.id, "JSON response")
            if not kind.startswith("text/event-stream"):
                return _error(call.id, INVALID_REQUEST, f"Unexpected content type: {kind}")
            answer = await self._read_stream(response, call)
        finally:
            await response.aclose()
        if isinstance(answer, _Cut):
            return await self._resume(answer, request, call)
        return answer

    async def _resume(self, cut: _Cut, post: httpx2.Request, call: _Call) -> Answer:
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
                outcome = await self._read_stream(response, call, cut)
            finally:
                await response.aclose()
            if not isinstance(outcome, _Cut):
                return outcome
            cut, failed = outcome, 0  # it ended again without the answer: resumed again, as the SDK does
        return _error(call.id, CONNECTION_CLOSED, "SSE stream ended and reconnection attempts were exhausted")

    async def _read_stream(self, response: httpx2.Response, call: _Call, resumed: _Cut | None = None) -> Answer | _Cut:
        """The stream's answer, or where to resume it (``resumed``: where this stream was resumed from)."""
        last_id, retry_ms = resumed or (None, None)
        events = aiter(httpx2.EventSource(response, max_event_size=MAX_SSE_EVENT_BYTES))
        try:
            async for event in events:
                last_id = event.id or last_id
                retry_ms = event.retry if event.retry is not None else retry_ms
                if event.event != "message" or not event.data:
                    continue  # another kind of event, or a priming event (its id is kept above)
                try:
                    message = jsonrpc_message_adapter.validate_json(event.data, by_name=False)
                except ValidationError as exc:
                    return _error(call.id, PARSE_ERROR, f"Failed to parse SSE message: {exc}")
                if isinstance(message, JSONRPCResponse | JSONRPCError):
                    await self._read_to_the_end(events, call)
                    return message  # the POST's stream answers this request, whatever id it quotes
                if not await _progress(message, call):
                    await _deliver(message, call)
        except httpx2.SSEError as exc:
            return _error(call.id, CONNECTION_CLOSED, f"SSE stream failed: {exc}")
        except httpx2.TransportError:
            if last_id is None:
                raise  # broken, and not resumable: the caller's "may have run"
            logger.info("relay: a stream broke before its answer; it is resumed after event %s", last_id)
        if last_id is not None:
            return _Cut(last_id, retry_ms)  # a resumed stream that ended on no new event is resumed again
        return _error(call.id, CONNECTION_CLOSED, "SSE stream ended without a response")

    async def _read_to_the_end(self, events: AsyncIterator[Any], call: _Call) -> None:
        """Read on to an answered stream's end, briefly, so that its connection is kept.

        A server ends the stream just after the answer, but a body left before its end cannot be
        reused: closing it there cost a new connection (a TLS handshake) per call on every
        handshake-era upstream, whose answers are streams. A server that keeps an answered stream
        open past ``END_WAIT_S`` is not waited for again: its streams are closed at the answer.
        The wait ends well before the call's own timeout, which would turn the answer into none.
        """
        wait = self._end_wait_s
        if call.deadline is not None:
            wait = min(wait, call.deadline - asyncio.get_running_loop().time() - _BEFORE_DEADLINE_S)
        if wait <= 0:
            return
        try:
            async with asyncio.timeout(wait):
                async for _ in events:
                    pass  # what follows the answer: nothing the call waits for
        except TimeoutError:
            if wait == self._end_wait_s:  # not cut short by the call's deadline: the server keeps them open
                self._end_wait_s = 0.0
                logger.info("relay: an answered stream stayed open past %g s; later ones are closed at once", wait)
        except (httpx2.TransportError, httpx2.SSEError):
            pass  # it broke after the answer: the answer stands, the connection is closed

    def _resume_request(self, post: httpx2.Request, last_event_id: str) -> httpx2.Request:
        version = post.headers.get(MCP_PROTOCOL_VERSION_HEADER)
        headers = [*self._headers, *_RESUME_HEADERS, (LAST_EVENT_ID, last_event_id), *self._session_headers(version)]
        if version:
            headers.append((MCP_PROTOCOL_VERSION_HEADER.lower(), version))
        return httpx2.Request("GET", self._url, headers=headers, extensions={"timeout": self._timeouts})


def _call_message(call: _Call, params: Mapping[str, Any] | None) -> str:
    """The ``tools/call`` as the SDK's dispatcher writes it: the call's id, its progress token when a
    callback waits for progress, the W3C trace context in ``_meta``."""
    out = dict(params or {})
    meta = dict(out.get("_meta") or {})
    if call.on_progress is not None:
        meta["progressToken"] = call.id
    inject_trace_context(meta)
    if meta:
        out["_meta"] = meta
    else:
        out.pop("_meta", None)
    message = {"jsonrpc": "2.0", "id": call.id, "method": RELAYED_METHOD, "params": out}
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False)


class _Waiting(NamedTuple):
    call: _Call
    answer: asyncio.Future[Answer]


class PipeRelay:
    """Writes a stdio session's ``tools/call`` to the child's stdin; the link's reader of the child's
    stdout (``rewind.gateway.pipes``) hands back what answers them (see the module)."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self._waiting: dict[str, _Waiting] = {}
        self._stdin: ByteSendStream | None = None
        self._codec = ("utf-8", "strict")
        self._reporting: set[asyncio.Task[bool]] = set()  # progress callbacks running, held until they end
        self.relayed = 0  # calls written here, for the tests and the benchmark

    def attach(self, stdin: ByteSendStream, encoding: str, errors: str) -> None:
        """The child's stdin, and how its lines are encoded (the upstream's ``StdioServerParameters``)."""
        self._stdin, self._codec = stdin, (encoding, errors)

    def takes(self, opts: CallOptions) -> bool:
        return self._stdin is not None

    async def tool_call(
        self, params: Mapping[str, Any] | None, opts: CallOptions, peer: Peer | None = None
    ) -> dict[str, Any]:
        """What the SDK's dispatcher returns for the request: its result; raises ``MCPError`` as it does."""
        stdin = self._stdin
        if stdin is None:
            raise MCPError(code=CONNECTION_CLOSED, message="Connection closed")
        timeout = opts.get("timeout")
        call = _Call(f"relay-{next(self._ids)}", opts.get("on_progress"), peer, None)
        waiting = self._waiting[call.id] = _Waiting(call, asyncio.get_running_loop().create_future())
        line = (_call_message(call, params) + "\n").encode(*self._codec)
        self.relayed += 1
        try:
            return await _result_of(call, timeout, _exchange(stdin, line, waiting.answer))
        finally:
            del self._waiting[call.id]

    def take(self, line: str) -> bool:
        """Whether a line the child wrote answers a call waiting here, or reports its progress: if so,
        it went to that call. Anything else is the SDK's (False), a line that is not JSON included."""
        if not self._waiting:
            return False  # nothing relayed in flight: not even parsed here
        try:
            message = json.loads(line)
        except ValueError:
            return False
        if not isinstance(message, dict):
            return False
        answered = message.get("id")
        if "method" not in message and isinstance(answered, str) and (waiting := self._waiting.get(answered)):
            if not waiting.answer.done():
                waiting.answer.set_result(_answer(message, answered, "stdout line"))
            return True
        if message.get("method") == "notifications/progress":
            params = message.get("params")
            token = params.get("progressToken") if isinstance(params, dict) else None
            if isinstance(token, str) and (waiting := self._waiting.get(token)):
                self._report(message, waiting.call)
                return True
        return False

    def _report(self, message: dict[str, Any], call: _Call) -> None:
        """The call's progress, to its callback in a task of its own, as the SDK's dispatcher runs it:
        the reader goes on reading the other calls' answers meanwhile."""
        try:
            notification = JSONRPCNotification.model_validate(message)
        except ValidationError:
            return  # not a notification the SDK would read either
        task = asyncio.get_running_loop().create_task(_progress(notification, call))
        self._reporting.add(task)
        task.add_done_callback(self._reporting.discard)

    def close(self) -> None:
        """The child's stdout ended: every call waiting here fails as the SDK's fail (``CONNECTION_CLOSED``)."""
        self._stdin = None
        for waiting in self._waiting.values():
            if not waiting.answer.done():
                waiting.answer.set_result(_error(waiting.call.id, CONNECTION_CLOSED, "Connection closed"))


async def _exchange(stdin: ByteSendStream, line: bytes, answer: asyncio.Future[Answer]) -> Answer:
    try:
        await stdin.send(line)
    except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
        raise MCPError(code=CONNECTION_CLOSED, message="Connection closed") from None
    return await answer


async def _result_of(call: _Call, timeout: float | None, exchange: Awaitable[Answer]) -> dict[str, Any]:
    """The result the exchange brought, as the SDK's dispatcher returns it: a JSON-RPC error raised as
    ``MCPError``, ``REQUEST_TIMEOUT`` after ``timeout``; a call timed out or cancelled is abandoned."""
    try:
        async with asyncio.timeout(timeout):
            answer = await exchange
    except TimeoutError:
        await _abandon(call, f"timed out after {timeout}s")
        raise MCPError(code=REQUEST_TIMEOUT, message=f"Request {RELAYED_METHOD!r} timed out") from None
    except asyncio.CancelledError:
        await _abandon(call, "caller cancelled")
        raise
    if isinstance(answer, JSONRPCError):
        raise MCPError(code=answer.error.code, message=answer.error.message, data=answer.error.data)
    return answer.result


async def _abandon(call: _Call, reason: str) -> None:
    """Tell the SDK's side a call was given up, shielded as its dispatcher shields its own courtesy cancel."""
    if call.peer is None:
        return
    with anyio.move_on_after(ABANDON_S, shield=True):
        await call.peer.abandon(call.id, reason)


def _error(request_id: str, code: int, message: str) -> JSONRPCError:
    return JSONRPCError.model_validate(
        {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}
    )


def _answer(data: bytes | str | dict[str, Any], request_id: str, what: str) -> JSONRPCResponse | JSONRPCError:
    """The answer in ``data``: its bytes, or the JSON object already parsed from them (not parsed twice)."""
    try:
        if isinstance(data, dict):
            message = jsonrpc_message_adapter.validate_python(data, by_name=False)
        else:
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
    if response.status_code == 404:
        if response.request.headers.get(SESSION_HEADER):  # the upstream forgot the session
            return _error(request_id, INVALID_REQUEST, "Session terminated")
        return _error(request_id, METHOD_NOT_FOUND, "Not Found")  # no session: 404 is the method's
    return _error(request_id, INTERNAL_ERROR, "Server returned an error response")


def _is_stream(response: httpx2.Response) -> bool:
    return response.headers.get("content-type", "").lower().startswith("text/event-stream")


async def _progress(message: JSONRPCRequest | JSONRPCNotification, call: _Call) -> bool:
    """Whether this is the call's progress; if so it reaches its callback, checked as the SDK's
    dispatcher checks it."""
    params = message.params or {}
    if message.method != "notifications/progress" or params.get("progressToken") != call.id:
        return False
    progress, total, text = params.get("progress"), params.get("total"), params.get("message")
    if call.on_progress is None or isinstance(progress, bool) or not isinstance(progress, int | float):
        return True
    try:
        await call.on_progress(
            float(progress),
            float(total) if isinstance(total, int | float) and not isinstance(total, bool) else None,
            text if isinstance(text, str) else None,
        )
    except Exception:  # the SDK's dispatcher shields the callback the same way
        logger.exception("progress callback raised")
    return True


async def _deliver(message: JSONRPCRequest | JSONRPCNotification, call: _Call) -> None:
    if call.peer is None:
        logger.debug("relay: dropped %s from the upstream's stream", message.method)
        return
    await call.peer.deliver(message)


class RelayingDispatcher:
    """A session's dispatcher whose ``tools/call`` goes to a ``Relay`` (HTTP) or a ``PipeRelay`` (stdio);
    the rest to the SDK's own.

    Attributes are read from and written to the SDK's dispatcher, so the session and the link
    (which reads whether it closed) see the one they built. ``on_request`` and ``on_notify`` are
    the session's handlers, which the SDK's dispatcher runs for what its transport reads.
    """

    def __init__(self, inner: Any, relay: Relay | PipeRelay, on_request: Any = None, on_notify: Any = None) -> None:
        object.__setattr__(self, "_inner", inner)
        object.__setattr__(self, "relay", relay)
        object.__setattr__(self, "_handlers", (on_request, on_notify))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._inner, name, value)

    async def send_raw_request(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        opts = opts or {}
        if method != RELAYED_METHOD or kwargs or not self.relay.takes(opts):
            return await self._inner.send_raw_request(method, params, opts, **kwargs)
        if getattr(self._inner, "_closed", False):
            raise MCPError(code=CONNECTION_CLOSED, message="Connection closed")
        try:
            return await self.relay.tool_call(params, opts, self)
        except _Redirected:
            return await self._inner.send_raw_request(method, params, opts)

    async def deliver(self, message: JSONRPCRequest | JSONRPCNotification) -> None:
        """Into the SDK's dispatcher, as its receive loop hands what the transport read."""
        on_request, on_notify = self._handlers
        if on_request is None or on_notify is None:
            logger.debug("relay: dropped %s from the upstream's stream", message.method)
            return
        await self._inner._dispatch(SessionMessage(message), on_request, on_notify, None)

    async def abandon(self, request_id: str, reason: str) -> None:
        """The SDK's dispatcher's courtesy cancellation; its transport posts it only below 2026-07-28."""
        await self._inner.notify("notifications/cancelled", {"requestId": request_id, "reason": reason})
