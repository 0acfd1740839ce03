"""The gateway with the MCP SDK's server path taken out: a floor bench/gateway.py measures, never a server.

``application`` is ``rewind.asgi.application`` but for one thing. Behind the same HTTP guard
(bearer token, body size, the shared rate count, the envelope, scopes), a ``tools/call`` of an
upstream's tool (a name no tool of this server's own has) is answered by ``RewindMCPServer.call_tool``
directly, as one JSON body. Skipped: the whole server path of a 2026-07-28 POST
(``rewind.mcp.exchange``: the SDK's checks and protocol ladder, its runner, and the answer's way
out; the token is verified again here, as that path does). Everything else the gateway does
for the call is the product's own code, unchanged: the fail-closed decision, the audit rows,
and the relayed link to the upstream.

So the gateway's own CPU per call here is what it would be if the SDK's server path cost
nothing, and bench/gateway.py prints it beside the real one: how much of the cost is that path,
and whether the rest alone fits the target. It checks none of the headers, revision or
``Mcp-Param-*`` values the SDK checks, and drops progress and the cancellation of a call whose
client went away: it is a measuring instrument, and nothing serves it.
"""

from __future__ import annotations

import json
from typing import Any

from mcp.server.auth.middleware.auth_context import auth_context_var
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent

from rewind import asgi
from rewind.agents.mcp_auth import AgentTokenStore
from rewind.mcp.auth import CachedTokenVerifier
from rewind.mcp.http import ASGIApp, Receive, Scope, Send, _bearer, _header  # read as the guard reads them
from rewind.mcp.server import RewindMCPServer, build_asgi_app, build_server
from rewind.oauth.mcp_auth import OAuthTokenStore


async def _body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


class WithoutServerPath:
    """Answers an upstream tool's ``tools/call`` itself; hands everything else to the SDK's app."""

    def __init__(self, sdk_app: ASGIApp, server: RewindMCPServer, verifier: CachedTokenVerifier) -> None:
        self.sdk_app, self.server, self.verifier = sdk_app, server, verifier

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        name = _header(scope, b"mcp-name") or ""
        own = self.server._tool_manager.get_tool(name) is not None
        if scope["type"] != "http" or _header(scope, b"mcp-method") != "tools/call" or own:
            await self.sdk_app(scope, receive, send)
            return
        message = json.loads(await _body(receive))
        token = _bearer(scope)
        access = None if token is None else await self.verifier.verify_request_token(token)
        if access is None:
            raise RuntimeError("the guard passed a token the verifier refuses")
        bound = auth_context_var.set(AuthenticatedUser(access))
        try:
            result = await self.server.call_tool(name, message["params"].get("arguments") or {})
        except ToolError as exc:
            result = CallToolResult(content=[TextContent(type="text", text=str(exc))], is_error=True)
        finally:
            auth_context_var.reset(bound)
        answer = {"jsonrpc": "2.0", "id": message["id"], "result": _dumped(result)}
        body = json.dumps(answer, separators=(",", ":")).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _dumped(result: Any) -> dict[str, Any]:
    if not isinstance(result, CallToolResult):
        raise TypeError(f"an upstream tool answered {type(result).__name__}, not a CallToolResult")
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)


_server = build_server(token_stores=[AgentTokenStore(), OAuthTokenStore()])
_guard = build_asgi_app(_server)
_guard.app = WithoutServerPath(_guard.app, _server, _guard.verifier)
asgi.mcp_app = _guard  # read by asgi.application at each request: the lifespan and /mcp reach this guard
application = asgi.application
