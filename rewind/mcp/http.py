"""ASGI guard in front of the SDK's /mcp app: methods, bearer token, body size, rate limit, envelope.

In this order, each refusal with a body a client shows as a readable reason:
- 405 with ``Allow: POST`` for any other HTTP method, in every protocol era: the server is
  stateless, so there is no stream to open with GET and no session to end with DELETE;
- 401 without a valid bearer token, before the body is read. The SDK's own 401 says only
  "Authentication required"; this one says in one sentence how to get a token (the token store
  knows how its tokens are issued), in the body and in the challenge's error_description, and
  never quotes the token sent. The SDK checks the token again behind this guard, as a second lock;
- 413 when the body is over MCP_MAX_BODY_BYTES (checked on Content-Length and while reading);
- 429 with Retry-After when an agent is over its limit (every authenticated request counts,
  malformed ones too);
- 400 with -32700 (parse error) or -32600 (invalid request) for a body that is not one JSON-RPC
  message, in both protocol eras (``rewind.mcp.envelope``);
- -32601 (method not found) for a JSON-RPC method name longer than any MCP method, quoting a
  short excerpt of it (the SDK would echo all of it).

The 405, 413, 400, -32601 and 429 bodies are JSON-RPC errors that quote at most an excerpt of
what was sent; the 401 body is the SDK's RFC 6750 shape (``error``, ``error_description``). The
limit is counted once for the whole deployment (``rewind.mcp.ratelimit``: in Redis when
REDIS_URL is set, else in the database).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from mcp.server.auth.provider import AccessToken

from rewind.mcp.auth import CachedTokenVerifier
from rewind.mcp.envelope import INVALID_REQUEST, Envelope, read_envelope
from rewind.mcp.errors import excerpt
from rewind.mcp.ratelimit import RateLimiter

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

METHOD_NOT_FOUND = -32601
ALLOWED_METHODS = "POST"
# No MCP method name comes near this; a longer one is answered here, quoting an excerpt.
METHOD_NAME_MAX_CHARS = 128
RATE_LIMITED = -32029  # server-defined range; the HTTP status says the rest


def _header(scope: Scope, name: bytes) -> str | None:
    """The value of header ``name`` (lower case: ASGI servers give header names in lower case)."""
    for key, value in scope.get("headers") or ():
        if key == name:
            return value.decode("latin-1")
    return None


def _bearer(scope: Scope) -> str | None:
    """The bearer token sent, read exactly as the SDK reads it (``BearerAuthBackend``): the guard
    and the SDK must accept the same requests, or a client would meet the SDK's bare 401."""
    authorization = _header(scope, b"authorization")
    if not authorization or not authorization.lower().startswith("bearer "):
        return None
    return authorization[len("bearer ") :]


# What a WWW-Authenticate error_description may hold (RFC 6750 section 3): printable ASCII but " and \.
_NOT_IN_CHALLENGE = re.compile(r"[^\x20\x21\x23-\x5b\x5d-\x7e]")


async def _send_unauthorized(send: Send, description: str) -> None:
    # The SDK's shape (mcp.server.auth.middleware.bearer_auth), so clients parse it as before; no
    # resource_metadata: there is no OAuth authorization server to point at.
    challenge = f'Bearer error="invalid_token", error_description="{_NOT_IN_CHALLENGE.sub("", description)}"'
    body = json.dumps({"error": "invalid_token", "error_description": description}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"www-authenticate", challenge.encode()),
    ]
    await send({"type": "http.response.start", "status": 401, "headers": headers})
    await send({"type": "http.response.body", "body": body})


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
    def __init__(
        self, app: ASGIApp, *, verifier: CachedTokenVerifier, max_body_bytes: int, limiter: RateLimiter
    ) -> None:
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
        access = await self._authenticated(scope, send)
        if access is None:
            return
        body = await self._read_body(scope, receive, send)
        if body is None:
            return
        envelope = read_envelope(body)
        if await self._over_rate(access, envelope, send):
            return
        if envelope.error_code is not None:
            await _send_error(send, 400, envelope.error_code, envelope.error, envelope.rpc_id)
            return
        if envelope.method is not None and len(envelope.method) > METHOD_NAME_MAX_CHARS:
            message = f"method not found: {excerpt(envelope.method)}"
            await _send_error(send, 404, METHOD_NOT_FOUND, message, envelope.rpc_id)
            return
        await self.app(scope, _replay(body, receive), send)

    async def _authenticated(self, scope: Scope, send: Send) -> AccessToken | None:
        """The caller's access, or None once a 401 saying how to get a token has been sent."""
        token = _bearer(scope)
        access = None if token is None else await self.verifier.verify_token(token)
        if access is not None:
            return access
        if token is None:
            problem = "This MCP endpoint needs an agent's bearer token, and none was sent"
        else:
            problem = "The bearer token was refused (unknown, revoked or expired, or its agent is inactive)"
        await _send_unauthorized(send, f"{problem}: {self.verifier.how_to_get_a_token}.")
        return None

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

    async def _over_rate(self, access: AccessToken, envelope: Envelope, send: Send) -> bool:
        wait = await self.limiter.take(access.client_id)
        if wait <= 0:
            return False
        retry_after = max(1, math.ceil(wait))
        message = (
            f"rate limit exceeded for agent {access.client_id}: {self.limiter.limit.describe()}; "
            f"retry after {retry_after} s"
        )
        headers = [(b"retry-after", str(retry_after).encode())]
        await _send_error(send, 429, RATE_LIMITED, message, envelope.rpc_id, headers)
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
