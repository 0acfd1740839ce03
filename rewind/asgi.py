"""The ASGI entry point: Django for pages, admin and API; the MCP app for /mcp.

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


async def application(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        # Django's handler refuses the lifespan scope; acknowledge it here.
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    await django_app(scope, receive, send)
