"""ASGI guard in front of the SDK's /mcp app: methods, bearer token, body size, rate limit, envelope (docs/mcp.md,
"Refusals").

Each refusal has a body a client shows as a readable reason, quoting at most an excerpt of what was sent. Its
401 says in one sentence how to get a token and carries the challenge the MCP authorization flow starts from
(RFC 9728 section 5.1), where the SDK's says only "Authentication required"; it comes before the body is read.
Header values are trimmed as HTTP defines them (RFC 9110 section 5.5), whichever parser the server runs, since
the SDK compares ``Mcp-Name`` with the body. The SDK checks the token again behind this guard, as a second lock.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from mcp.server.auth.provider import AccessToken

from rewind.mcp import scopes
from rewind.mcp.auth import CachedTokenVerifier
from rewind.mcp.endpoint import mcp_resource, protected_resource_metadata_url, same_resource
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


_OWS = b" \t"


def _trim_header_values(scope: Scope) -> None:
    """Header values without surrounding whitespace (RFC 9110 section 5.5); untouched when none has any."""
    headers = scope.get("headers") or ()
    if any(value[:1] in (b" ", b"\t") or value[-1:] in (b" ", b"\t") for _, value in headers):
        scope["headers"] = [(name, value.strip(_OWS)) for name, value in headers]


def _bearer(scope: Scope) -> str | None:
    """The bearer token sent, read exactly as the SDK reads it (``BearerAuthBackend``): the guard
    and the SDK must accept the same requests, or a client would meet the SDK's bare 401."""
    authorization = _header(scope, b"authorization")
    if not authorization or not authorization.lower().startswith("bearer "):
        return None
    return authorization[len("bearer ") :]


# What a WWW-Authenticate error_description may hold (RFC 6750 section 3): printable ASCII but " and \.
_NOT_IN_CHALLENGE = re.compile(r"[^\x20\x21\x23-\x5b\x5d-\x7e]")
# What a host asks for when the challenge names no other scope: all an agent here usually uses.
CHALLENGE_SCOPE = " ".join(scopes.ALL)


def request_resource(scope: Scope) -> str:
    """The resource (RFC 8707) this request addresses: REWIND_PUBLIC_URL's /mcp, else the Host it came to."""
    host = _header(scope, b"host") or "{}:{}".format(*(scope.get("server") or ("localhost", 80)))
    return mcp_resource(f"{scope.get('scheme', 'http')}://{host}/")


async def _send_challenge(
    send: Send, scope: Scope, status: int, error: str | None, description: str, needed: str = CHALLENGE_SCOPE
) -> None:
    """A Bearer challenge (RFC 6750 section 3, RFC 9728 section 5.1) and the SDK's body shape."""
    params = [f'resource_metadata="{protected_resource_metadata_url(request_resource(scope))}"', f'scope="{needed}"']
    if error is not None:
        params += [f'error="{error}"', f'error_description="{_NOT_IN_CHALLENGE.sub("", description)}"']
    body = json.dumps({"error": error or "invalid_request", "error_description": description}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"www-authenticate", ("Bearer " + ", ".join(params)).encode()),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
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


_ALL_SCOPES = frozenset(scopes.ALL)


def _called_tool(scope: Scope, body: bytes) -> str | None:
    """The tool a tools/call names: its Mcp-Name header at 2026-07-28 (the SDK refuses a body that says
    otherwise), else the body's ``params.name``; None for another method or a body the SDK will refuse."""
    if _header(scope, b"mcp-method") == "tools/call":
        return _header(scope, b"mcp-name")
    if b"tools/call" not in body:  # cheap: most other bodies are never parsed here
        return None
    try:
        message = json.loads(body)
    except ValueError:
        return None
    if not isinstance(message, dict) or message.get("method") != "tools/call":
        return None
    params = message.get("params")
    name = params.get("name") if isinstance(params, dict) else None
    return name if isinstance(name, str) else None


class McpHttpGuard:
    def __init__(
        self,
        app: ASGIApp,
        *,
        verifier: CachedTokenVerifier,
        max_body_bytes: int,
        limiter: RateLimiter,
        required_scope: Callable[[str], Awaitable[str | None]],
    ) -> None:
        self.app = app
        self.verifier = verifier
        self.max_body_bytes = max_body_bytes
        self.limiter = limiter
        self.required_scope = required_scope  # a tool's name -> the scope a call needs (None: no such tool)
        self.open_requests = 0  # POSTs of this process between arrival and answer (the rate count may gather them)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        _trim_header_values(scope)
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
        self.open_requests += 1
        try:
            await self._post(scope, receive, send)
        finally:
            self.open_requests -= 1

    async def _post(self, scope: Scope, receive: Receive, send: Send) -> None:
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
        if await self._outside_scopes(access, body, scope, send):
            return
        await self.app(scope, _replay(body, receive), send)

    async def _authenticated(self, scope: Scope, send: Send) -> AccessToken | None:
        """The caller's access, or None once a 401 saying how to get a token has been sent."""
        token = _bearer(scope)
        access = None if token is None else await self.verifier.verify_request_token(token)
        if access is not None and (access.resource is None or same_resource(access.resource, request_resource(scope))):
            return access
        how = self.verifier.how_to_get_a_token
        if token is None:
            problem = "This MCP endpoint needs an agent's bearer token, and none was sent"
            await _send_challenge(send, scope, 401, None, f"{problem}: sign in with OAuth, or {how}.")
            return None
        if access is None:
            problem = "The bearer token was refused (unknown, revoked or expired, or its agent is inactive)"
        else:
            problem = f"The bearer token was issued for another resource ({access.resource}), not this one"
        await _send_challenge(send, scope, 401, "invalid_token", f"{problem}: sign in with OAuth again, or {how}.")
        return None

    async def _outside_scopes(self, access: AccessToken, body: bytes, scope: Scope, send: Send) -> bool:
        if set(access.scopes) >= _ALL_SCOPES:
            return False  # the usual pasted token: nothing to look at
        name = _called_tool(scope, body)
        needed = await self.required_scope(name) if name is not None else None
        if needed is None or needed in access.scopes:
            return False  # allowed, or no such tool: the SDK says so
        error = scopes.InsufficientScopeError(needed, f"tool {excerpt(name or '')}")
        await _send_challenge(send, scope, 403, "insufficient_scope", str(error), needed)
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

    async def _over_rate(self, access: AccessToken, envelope: Envelope, send: Send) -> bool:
        wait = await self.limiter.take(access.client_id, others_open=self.open_requests > 1)
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
