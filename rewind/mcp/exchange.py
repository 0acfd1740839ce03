"""A 2026-07-28 POST served on the event loop's own terms; every decision stays the SDK's.

Why: the SDK's single-exchange entry (``handle_modern_request``) runs every request in SSE mode
as an anyio task group, two tasks, a zero-buffer memory stream and a cancel scope, so it can
defer choosing between JSON and an event stream. On a call the gateway forwards, serving the
exchange here saves 0.17 ms of the gateway's own CPU per call (``bench/gateway.py``, 1 client,
ten rounds side by side with a copy served by the SDK's entry: 2.51 against 2.68 ms).

What is the SDK's, called as it calls it: the transport security check (Host, Origin), the
Accept check, parsing, the notification and envelope rules, the duplicated routing header, the
protocol ladder (``classify_inbound_request``: the revision, ``Mcp-Method``/``Mcp-Name`` against
the body, the ``_meta`` envelope), the ``Mcp-Param-*`` check against the tool's schema, the
dispatch itself (``serve_one``: its request validation, the tool's ``Context``, middleware,
result serialization) and every error's mapping to the wire. This module replaces only how the
answer goes out, with what the SDK's SSE mode promises:
- a call that emits nothing within ``_SSE_PING_INTERVAL`` gets one ``application/json`` answer
  with the table-mapped status;
- the first notification (progress) commits ``text/event-stream``; so does a call silent past
  that interval, which is then pinged every interval so a proxy's idle timeout cannot cut it;
- a client that disconnects cancels the call (the 2026-07-28 wire's cancellation), and is sent
  nothing.

Here the call runs in the request's own task, its notifications are written from it directly,
and one small task waits for the disconnect. ``tests/mcp/test_exchange.py`` holds each answer
against the SDK's own entry, byte for byte.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Iterator
from typing import Any, TypeVar

from mcp.server._streamable_http_modern import (  # the SDK's own rules, pinned with the SDK (requirements.txt)
    _INVALID_BODY,
    _SSE_HEADERS,
    _SSE_PING_INTERVAL,
    _acknowledge_notification,
    _is_notification_shaped,
    _mcp_param_rejection,
    _SingleExchangeDispatchContext,
    _sse_event,
    _to_jsonrpc_response,
    _write,
    _write_rejection,
)
from mcp.server.auth.middleware.auth_context import auth_context_var
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken, TokenVerifier
from mcp.server.connection import Connection
from mcp.server.lowlevel.server import Server
from mcp.server.mcpserver import MCPServer
from mcp.server.runner import serve_one
from mcp.server.streamable_http import check_accept_headers
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from mcp.shared.inbound import (
    InboundLadderRejection,
    InboundModernRoute,
    classify_inbound_request,
    find_duplicated_routing_header,
)
from mcp.shared.jsonrpc_dispatcher import progress_token_from_params
from mcp.shared.message import ServerMessageMetadata
from mcp.shared.transport_context import TransportContext
from mcp_types import HEADER_MISMATCH, PARSE_ERROR, ErrorData, JSONRPCError, JSONRPCRequest
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError
from starlette.authentication import AuthCredentials
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from rewind.mcp.http import _bearer, _header  # the token and headers read exactly as the guard reads them

_OK_STATUS = 200
T = TypeVar("T")


class _Answer:
    """How one call's answer goes out: JSON until something must be streamed, then an event stream.

    Used as the dispatch context's ``sink``: the SDK's ``notify`` sends each notification's
    bytes here, from the call's own task.
    """

    def __init__(self, send: Send) -> None:
        self._send = send
        self.streaming = False
        self._lock = asyncio.Lock()  # a ping and a notification never interleave their writes

    async def send(self, event: bytes) -> None:
        async with self._lock:
            await self._start_stream()
            await self._send({"type": "http.response.body", "body": event, "more_body": True})

    async def ping_forever(self) -> None:
        while True:
            async with self._lock:
                await self._start_stream()
                await self._send({"type": "http.response.body", "body": b": ping\r\n\r\n", "more_body": True})
            await asyncio.sleep(_SSE_PING_INTERVAL)

    async def last(self, event: bytes) -> None:
        async with self._lock:
            await self._send({"type": "http.response.body", "body": event, "more_body": False})

    async def _start_stream(self) -> None:
        if not self.streaming:
            self.streaming = True
            await self._send({"type": "http.response.start", "status": _OK_STATUS, "headers": _SSE_HEADERS})


async def _parsed(request: Request, scope: Scope, receive: Receive, send: Send) -> tuple[Any, JSONRPCRequest] | None:
    """The body and its request when it is one JSON-RPC request; None once refused as the SDK refuses it."""
    decoded: Any
    try:
        decoded = json.loads(await request.body())
    except (ValueError, RecursionError):
        # Not just JSONDecodeError: oversized integer literals raise bare ValueError, deep nesting RecursionError.
        rej = JSONRPCError(jsonrpc="2.0", id=None, error=ErrorData(code=PARSE_ERROR, message="Parse error"))
        await _write(rej, scope, receive, send)
        return None
    if _is_notification_shaped(decoded):
        await _acknowledge_notification(decoded, request, scope, receive, send)
        return None
    try:
        return decoded, JSONRPCRequest.model_validate(decoded)
    except ValidationError:
        await _write(_INVALID_BODY, scope, receive, send)
        return None


async def _admitted(
    app: Server[Any],
    security_settings: TransportSecuritySettings | None,
    lifespan_state: Any,
    request: Request,
    send: Send,
) -> tuple[JSONRPCRequest, InboundModernRoute] | None:
    """The request and its route once every check of the SDK's entry passed; None once refused, as it refuses."""
    scope, receive = request.scope, request.receive
    err = await TransportSecurityMiddleware(security_settings).validate_request(request, is_post=True)
    if err is not None:
        await err(scope, receive, send)
        return None
    has_json, has_sse = check_accept_headers(request)
    if not (has_json and has_sse):
        await Response(status_code=406)(scope, receive, send)
        return None
    parsed = await _parsed(request, scope, receive, send)
    if parsed is None:
        return None
    decoded, req = parsed
    duplicated = find_duplicated_routing_header(request.headers.items())
    if duplicated is not None:
        rejection = InboundLadderRejection(code=HEADER_MISMATCH, message=f"{duplicated} header appears more than once")
        await _write_rejection(rejection, req.id, scope, receive, send)
        return None
    verdict = classify_inbound_request(decoded, headers=dict(request.headers))
    if isinstance(verdict, InboundLadderRejection):
        await _write_rejection(verdict, req.id, scope, receive, send)
        return None
    param_rejection = await _mcp_param_rejection(app, request, req, verdict, lifespan_state)
    if param_rejection is not None:
        await _write_rejection(param_rejection, req.id, scope, receive, send)
        return None
    return req, verdict


async def handle_post(
    app: Server[Any],
    security_settings: TransportSecuritySettings | None,
    lifespan_state: Any,
    scope: Scope,
    receive: Receive,
    send: Send,
) -> None:
    """Serve one 2026-07-28 POST as the SDK's entry does in SSE mode (see the module)."""
    request = Request(scope, receive)
    admitted = await _admitted(app, security_settings, lifespan_state, request, send)
    if admitted is None:
        return
    req, verdict = admitted
    answer = _Answer(send)
    dctx = _SingleExchangeDispatchContext(
        transport=TransportContext(kind="streamable-http", can_send_request=False, headers=request.headers),
        request_id=req.id,
        message_metadata=ServerMessageMetadata(request_context=request),
        progress_token=progress_token_from_params(req.params),
        sink=answer,  # type: ignore[arg-type]  # duck-typed: the SDK only awaits its send()
    )
    connection = Connection.from_envelope(verdict.protocol_version, verdict.client_info, verdict.client_capabilities)
    call = serve_one(app, dctx, req.method, req.params, connection=connection, lifespan_state=lifespan_state)
    watch = _DisconnectWatch(receive)
    with watch, _pinged_when_silent(answer):
        try:
            msg = await watch.run(_to_jsonrpc_response(req.id, call))
        except asyncio.CancelledError:
            if watch.cancelled_it and watch.uncancelled() == 0:
                return  # the client went away: nobody to answer
            raise  # cancelled from elsewhere too (the server stops): that cancellation goes on
    if answer.streaming:
        await answer.last(_sse_event(msg))
    else:
        await _write(msg, scope, receive, send)


class _DisconnectWatch:
    """Cancels the call it ``run``s when the client disconnects meanwhile; ``cancelled_it`` says it did."""

    def __init__(self, receive: Receive) -> None:
        self._receive = receive
        self._watcher: asyncio.Task[None] | None = None
        self._running: asyncio.Task[Any] | None = None  # the task to cancel, while it awaits the call
        self.cancelled_it = False

    def uncancelled(self) -> int:
        """Take back this watch's cancellation of the task; the cancellations still requested of it."""
        task = asyncio.current_task()
        return 0 if task is None else task.uncancel()

    async def run(self, call: Awaitable[T]) -> T:
        self._running = asyncio.current_task()
        try:
            return await call
        finally:
            self._running = None  # no await between the call's end and here: a late disconnect cancels nothing

    def __enter__(self) -> _DisconnectWatch:
        self._watcher = asyncio.ensure_future(self._watch())
        return self

    def __exit__(self, *exc: object) -> None:
        if self._watcher is not None:
            self._watcher.cancel()

    async def _watch(self) -> None:
        while (await self._receive()).get("type") != "http.disconnect":
            pass
        if self._running is not None:
            self.cancelled_it = True
            self._running.cancel()


@contextlib.contextmanager
def _pinged_when_silent(answer: _Answer) -> Iterator[None]:
    """From ``_SSE_PING_INTERVAL`` on, the event stream is committed and pinged each interval."""
    loop = asyncio.get_running_loop()
    pinging: list[asyncio.Task[None]] = []
    timer = loop.call_later(_SSE_PING_INTERVAL, lambda: pinging.append(loop.create_task(answer.ping_forever())))
    try:
        yield
    finally:
        timer.cancel()
        for task in pinging:
            task.cancel()


class ModernPosts:
    """In front of the SDK's app: a POST of a 2026-07-28 client goes to ``handle_post``, the rest to the SDK.

    Behind ``McpHttpGuard``, which has refused whatever carries no valid token. The SDK's own
    auth middleware checks the token again as a second lock; so does this, with the same cached
    verifier, and binds the access for the tools as that middleware does. A request it cannot
    take (a refused token, a session manager not running) goes to the SDK, which answers it.
    """

    def __init__(self, sdk_app: Any, server: MCPServer, verifier: TokenVerifier) -> None:
        self.sdk_app, self.server, self.verifier = sdk_app, server, verifier

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        access = await self._taken(scope)
        if access is None:
            await self.sdk_app(scope, receive, send)
            return
        manager = self.server.session_manager
        scope["user"], scope["auth"] = AuthenticatedUser(access), AuthCredentials(access.scopes)
        bound = auth_context_var.set(AuthenticatedUser(access))
        try:
            lowlevel = self.server._lowlevel_server
            await handle_post(lowlevel, manager.security_settings, manager._lifespan_state, scope, receive, send)
        finally:
            auth_context_var.reset(bound)

    async def _taken(self, scope: Scope) -> AccessToken | None:
        if scope["type"] != "http" or scope.get("method") != "POST":
            return None
        if _header(scope, b"mcp-protocol-version") not in MODERN_PROTOCOL_VERSIONS:
            return None  # the handshake era, and a revision the SDK's ladder names in its refusal
        if self.server.session_manager._task_group is None:
            return None  # not running (no lifespan): the SDK says so
        token = _bearer(scope)
        return None if token is None else await self.verifier.verify_token(token)
