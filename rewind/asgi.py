"""The ASGI entry point: Django for pages, admin and API; the MCP SDK's app for /mcp.

uvicorn does not serve static files, so Django is wrapped in the static-files handler
unless REWIND_SERVE_STATIC is off (a front proxy serves collected files then).
"""

from __future__ import annotations

import os
from typing import Any

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "rewind.settings")
django_app: Any = get_asgi_application()  # runs django.setup() before anything imports models

from django.conf import settings  # noqa: E402

if settings.REWIND_SERVE_STATIC:
    from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler

    django_app = ASGIStaticFilesHandler(django_app)


from asgiref.sync import sync_to_async  # noqa: E402

from rewind import startup  # noqa: E402
from rewind.agents.mcp_auth import AgentTokenStore  # noqa: E402
from rewind.audit.verification import audit_anchor_publish_at_exit  # noqa: E402
from rewind.mcp.endpoint import MCP_PATH  # noqa: E402
from rewind.mcp.server import build_asgi_app, build_server  # noqa: E402
from rewind.oauth.mcp_auth import OAuthTokenStore  # noqa: E402

startup.shorten_gil_turns()  # the event loop gets the GIL back from busy pool threads sooner

# The MCP framework names no part: the agents' pasted tokens and the OAuth grants' tokens are the
# bearer tokens it takes.
mcp_app: Any = build_asgi_app(build_server(token_stores=[AgentTokenStore(), OAuthTokenStore()]))
_MCP_PATHS = frozenset({MCP_PATH})


async def application(scope: dict[str, Any], receive: Any, send: Any) -> None:
    # Django's handler refuses the lifespan scope, and the MCP app needs it: its session
    # manager only runs inside the lifespan.
    if scope["type"] == "lifespan":
        # The worker has built everything it serves with by now: freeze it (``rewind.startup``).
        startup.freeze_startup_heap()
        await mcp_app(scope, receive, _anchoring_at_shutdown(send))
        return
    if scope["type"] == "http" and scope["path"] in _MCP_PATHS:
        await mcp_app(scope, receive, send)
        return
    await django_app(scope, receive, send)


def _anchoring_at_shutdown(send: Any) -> Any:
    """``send`` of the lifespan: once the app has stopped, the audit events this process recorded
    last are anchored before the server is told it may exit (not at the beat's next run)."""

    async def sending(message: dict[str, Any]) -> None:
        if message["type"] == "lifespan.shutdown.complete":
            await sync_to_async(audit_anchor_publish_at_exit, thread_sensitive=False)(f"web process {os.getpid()}")
        await send(message)

    return sending
