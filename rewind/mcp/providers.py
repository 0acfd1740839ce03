"""Tools the server does not hold itself, known only at run time (the gateway's upstream tools): the server lists
them after its own and hands a provider any call of a name it does not know, with the framework's duties
(request id, audit row, plain error texts) applied all the same.
"""

from __future__ import annotations

from typing import Any, Protocol

from mcp.server.mcpserver import Context
from mcp_types import CallToolResult, InputRequiredResult
from mcp_types import Tool as MCPTool


class ToolProvider(Protocol):
    # The scope (rewind.mcp.scopes) every tool of the provider needs; a call may need more, which the
    # provider checks itself.
    scope: str

    async def tools(self) -> list[MCPTool]:
        """The tools to list now; must not raise for one unreachable source (leave it out instead)."""
        ...

    async def has(self, name: str) -> bool: ...

    async def call(
        self, name: str, arguments: dict[str, Any], context: Context | None
    ) -> CallToolResult | InputRequiredResult: ...
