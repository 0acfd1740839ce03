"""Where the MCP endpoint is: its path, and the one rule for the URL handed to a client.

Kept apart from ``rewind.mcp.server`` so that ``manage.py mcpconfig`` and the admin's
"Connect an agent" page can name the endpoint without importing the MCP SDK (about 0.7 s,
which every Django process would otherwise pay when the admin loads).
"""

from __future__ import annotations

from django.conf import settings

MCP_PATH = "/mcp"


def mcp_public_url(*, opened_at: str | None = None) -> str:
    """The MCP endpoint a client should call: REWIND_PUBLIC_URL + ``MCP_PATH`` when that setting is
    configured; otherwise the address the asking page was opened at (``opened_at``, a base URL such as
    ``request.build_absolute_uri("/")``), since a browser reached the service there; otherwise the
    default REWIND_PUBLIC_URL (a command has no such address).
    """
    if settings.REWIND_PUBLIC_URL_CONFIGURED or not opened_at:
        return f"{settings.REWIND_PUBLIC_URL}{MCP_PATH}"
    return f"{opened_at.rstrip('/')}{MCP_PATH}"
