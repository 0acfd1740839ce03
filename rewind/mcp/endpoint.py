"""Where the MCP endpoint is: its path, and the one rule for the URL handed to a client.

Apart from ``rewind.mcp.server`` so that ``manage.py mcpconfig`` and the admin's "Connect an agent" page name
the endpoint without importing the MCP SDK, which every Django process would otherwise pay for (measured: see
the benchmarks page).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from django.conf import settings

from rewind.lib.processes import running_stack_url

MCP_PATH = "/mcp"


def public_base_url(*, opened_at: str | None = None) -> str:
    """The address clients reach the service at: REWIND_PUBLIC_URL when configured; else the address the asking
    page was opened at (``opened_at``), since a browser reached the service there; else the address the running
    ``make run`` serves, else the default REWIND_PUBLIC_URL."""
    if settings.REWIND_PUBLIC_URL_CONFIGURED:
        return str(settings.REWIND_PUBLIC_URL)
    if opened_at:
        return opened_at.rstrip("/")
    return running_stack_url(settings.VAR_DIR) or str(settings.REWIND_PUBLIC_URL)


def mcp_public_url(*, opened_at: str | None = None) -> str:
    return f"{public_base_url(opened_at=opened_at)}{MCP_PATH}"


# RFC 9728 section 3.1: the metadata of the resource https://host/mcp is at this path + /mcp.
PROTECTED_RESOURCE_METADATA_PATH = "/.well-known/oauth-protected-resource"


def mcp_resource(request_url: str) -> str:
    """The resource indicator (RFC 8707) of the endpoint for a request to ``request_url``: REWIND_PUBLIC_URL +
    ``MCP_PATH`` when configured, so OAuth tokens are bound to the public address whatever Host a proxy sends;
    otherwise the address the request came to."""
    parts = urlsplit(request_url)
    return mcp_public_url(opened_at=f"{parts.scheme}://{parts.netloc}")


def protected_resource_metadata_url(resource: str) -> str:
    parts = urlsplit(resource)
    return f"{parts.scheme}://{parts.netloc}{PROTECTED_RESOURCE_METADATA_PATH}{parts.path}"


def same_resource(a: str, b: str) -> bool:
    """Equal as resource indicators: scheme and host in any case, a trailing slash aside."""

    def norm(url: str) -> tuple[str, str, str]:
        parts = urlsplit(url)
        return parts.scheme.lower(), parts.netloc.lower(), parts.path.rstrip("/")

    return norm(a) == norm(b)
