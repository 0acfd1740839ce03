"""ASGI guard in front of the SDK's /mcp app: methods, body size, absurd method names, rate limit.

Each answers with a JSON-RPC error body, so a client reports a readable reason:
- 405 with ``Allow: POST`` for any other HTTP method, in every protocol era: the server is
  stateless, so there is no stream to open with GET and no session to end with DELETE;
- 413 when the body is over MCP_MAX_BODY_BYTES (checked on Content-Length and while reading);
- -32601 (method not found) for a JSON-RPC method name longer than any MCP method, quoting a
  short excerpt of it (the SDK would echo all of it);
- 429 with Retry-After when an agent is over MCP_RATE_LIMIT_PER_MINUTE.

The limit is counted once for the whole deployment (``rewind.mcp.ratelimit``: in Redis when
REDIS_URL is set, else in the database). Requests without a valid token pass through untouched:
the SDK answers them 401.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from mcp.server.auth.provider import TokenVerifier

from rewind.mcp.errors import excerpt
from rewind.mcp.ratelimit import RateLimiter

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
ALLOWED_METHODS = "POST"
# No MCP method name comes near this; a longer one is answered here, quoting an excerpt.
METHOD_NAME_MAX_CHARS = 128
_LONG_METHOD = re.compile(rb'"method"\s*:\s*"(?:[^"\\]|\\.){%d,}' % (METHOD_NAME_MAX_CHARS + 1))
RATE_LIMITED = -32029  # server-defined range; the HTTP status says the rest


def _header(scope: Scope, name: bytes) -> str | None:
    """The value of header ``name`` (lower case: ASGI servers give header names in lower case)."""
    for key, value in scope.get("headers") or ():
        if key == name:
            return value.decode("latin-1")
    return None


def _rpc_id(body: bytes) -> Any:
    try:
        message = json.loads(body)
    except ValueError:
        return None
    return message.get("id") if isinstance(message, dict) else None


async def _send_error(
    send: Send,
    status: int,
    code: int,
    message: str,
    rpc_id: Any = None,
    extra_headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": rpc_id, "error": {"code": code, "message": message}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers + (extra_headers or [])})
    await send({"type": "http.response.body", "body": body})


class McpHttpGuard:
    def __init__(self, app: ASGIApp, *, verifier: TokenVerifier, max_body_bytes: int, limiter: RateLimiter) -> None:
        self.app = app
        self.verifier = verifier
        self.max_body_bytes = max_body_bytes
        self.limiter = limiter

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope.get("method") != "POST":
            await _send_error(
                send,
                405,
                INVALID_REQUEST,
                f"method {scope.get('method')} not allowed: this stateless MCP endpoint takes only "
                "POST (no stream to open with GET, no session to end with DELETE)",
                extra_headers=[(b"allow", ALLOWED_METHODS.encode())],
            )
            return
        body = await self._read_body(scope, receive, send)
        if body is None:
            return
        if await self._absurd_method(body, send):
            return
        if await self._over_rate(scope, body, send):
            return
        await self.app(scope, _replay(body, receive), send)

    @staticmethod
    async def _absurd_method(body: bytes, send: Send) -> bool:
        if _LONG_METHOD.search(body) is None:  # cheap: most bodies are never parsed here
            return False
        try:
            message = json.loads(body)
        except ValueError:
            return False
        method = message.get("method") if isinstance(message, dict) else None
        if not isinstance(method, str) or len(method) <= METHOD_NAME_MAX_CHARS:
            return False
        await _send_error(send, 404, METHOD_NOT_FOUND, f"method not found: {excerpt(method)}", message.get("id"))
        return True

    async def _read_body(self, scope: Scope, receive: Receive, send: Send) -> bytes | None:
        too_large = f"request body too large (limit {self.max_body_bytes} bytes)"
        declared = _header(scope, b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
            await _send_error(send, 413, INVALID_REQUEST, too_large)
            return None
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                await _send_error(send, 413, INVALID_REQUEST, too_large)
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def _over_rate(self, scope: Scope, body: bytes, send: Send) -> bool:
        authorization = _header(scope, b"authorization") or ""
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return False
        access = await self.verifier.verify_token(token.strip())
        if access is None:
            return False
        wait = await self.limiter.take(access.client_id)
        if wait <= 0:
            return False
        retry_after = max(1, math.ceil(wait))
        message = (
            f"rate limit exceeded for agent {access.client_id}: at most {self.limiter.per_minute} requests "
            f"per minute; retry after {retry_after} s"
        )
        await _send_error(
            send, 429, RATE_LIMITED, message, _rpc_id(body), [(b"retry-after", str(retry_after).encode())]
        )
        return True


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # later calls: wait for the client's disconnect, as the SDK expects

    return replay
