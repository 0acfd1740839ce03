"""Tools the server does not hold itself: a part that offers tools only known at run time registers a provider.

The gateway is one (an upstream's tools, listed from the database). The server asks its
providers for tools after its own, and hands them any call of a name it does not know; the
framework duties (request id, audit row per call, plain error texts) apply to those calls too.
"""

from __future__ import annotations

from typing import Any, Protocol

from mcp.server.mcpserver import Context
from mcp_types import CallToolResult
from mcp_types import Tool as MCPTool


class ToolProvider(Protocol):
    # The scope (rewind.mcp.scopes) every tool of the provider needs; a call may need more, which the
    # provider checks itself.
    scope: str

    async def tools(self) -> list[MCPTool]:
        """The tools to list now; must not raise for one unreachable source (leave it out instead)."""
        ...

    async def has(self, name: str) -> bool: ...

    async def call(self, name: str, arguments: dict[str, Any], context: Context | None) -> CallToolResult: ...
