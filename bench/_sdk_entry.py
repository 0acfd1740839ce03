"""The gateway with every POST served by the MCP SDK's own entry: a reference bench/gateway.py measures, never a server.

``application`` is ``rewind.asgi.application`` but for one thing: behind the same HTTP guard,
``rewind.mcp.exchange.ModernPosts`` is taken out, so a 2026-07-28 POST goes through the SDK's
Starlette app, its auth middleware and its ``handle_modern_request`` (an anyio task group, two
tasks and a memory stream per call, to defer choosing JSON or SSE) as it did before that module.
bench/gateway.py prints the gateway's own CPU per call here beside the real one's: what serving
the exchange ourselves saves.
"""

from __future__ import annotations

from rewind import asgi
from rewind.mcp.exchange import ModernPosts

_posts = asgi.mcp_app.app
if not isinstance(_posts, ModernPosts):
    raise TypeError(f"the guard serves {type(_posts).__name__}, not ModernPosts: this reference is out of date")
asgi.mcp_app.app = _posts.sdk_app
application = asgi.application
