"""The gateway's tools on /mcp: every enabled upstream's exported tools, under their exposed names.

The list is what the last listing of each upstream stored in the database (refreshed by the
beat, the admin's "Test connection" and the REST check), so every worker and replica answers
the same in stateless mode. A call reads its tool's row afresh, so a policy set in the admin or
an upstream switched off applies to the next call on every worker. Only "is this one of the
gateway's names" is kept per process, briefly, to route a call without a query; a name not kept
is looked up at once, so a tool listed a moment ago by another process is callable.
"""

from __future__ import annotations

import time
from typing import Any

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp_types import CallToolResult, InputRequiredResult, ToolAnnotations
from mcp_types import Tool as MCPTool

from rewind.gateway.forward import forward_call
from rewind.gateway.models import UpstreamTool
from rewind.gateway.naming import SEPARATOR
from rewind.gateway.selectors import exported_name_exists, exported_names, exported_tools
from rewind.mcp import scopes
from rewind.mcp.context import SharedRead, run_db
from rewind.mcp.errors import UnknownToolError
from rewind.mcp.server import RewindMCPServer

# After the zerto tools: agents read those first, and some clients show only the head of the list.
TOOLS_POSITION = 900
NAMES_TTL_S = 5.0


def as_mcp_tool(t: UpstreamTool) -> MCPTool:
    """The upstream's tool as agents see it: its schemas, annotations and meta kept, its origin said."""
    annotations = ToolAnnotations.model_validate(t.annotations) if t.annotations else None
    return MCPTool(
        name=t.exposed_name,
        title=t.title or None,
        description=f"[{t.upstream.name}/{t.name} through zerto-rewind] {t.description}".strip(),
        input_schema=t.input_schema or {"type": "object"},
        output_schema=t.output_schema,
        annotations=annotations,
        _meta=t.meta,
    )


def _listing() -> list[MCPTool]:
    return [as_mcp_tool(t) for t in exported_tools()]


# Agents list the tools when they start, so a fleet starting at once lists together: one read
# after their calls began answers all of them (measured: 2.8 % of a replica's CPU while 120 agents
# started, each listing on its own).
_listing_read = SharedRead(_listing)


class GatewayTools:
    """The provider the MCP server asks for tools it does not hold itself.

    Calling any of them needs ``rewind:read``; a call the policy guards needs ``rewind:guard`` too
    (checked where the policy decides, ``rewind.gateway.forward``).
    """

    scope = scopes.READ

    def __init__(self) -> None:
        self._names: frozenset[str] = frozenset()
        self._names_at = float("-inf")

    async def _known(self, name: str, max_age: float) -> bool:
        if time.monotonic() - self._names_at >= max_age:
            self._names, self._names_at = await run_db(exported_names), time.monotonic()
        return name in self._names

    async def tools(self) -> list[MCPTool]:
        return list(await _listing_read())  # a list of its own: the read is shared

    async def has(self, name: str) -> bool:
        if SEPARATOR not in name:  # every exposed name has it; the zerto tools never do
            return False
        if await self._known(name, NAMES_TTL_S):
            return True
        # Not among the names this process kept: listed since (maybe by another worker), or not a tool.
        found = await run_db(exported_name_exists, name)
        if found:
            self._names_at = float("-inf")
        return found

    async def call(
        self, name: str, arguments: dict[str, Any], context: Context | None
    ) -> CallToolResult | InputRequiredResult:
        result = await forward_call(name, arguments, context)
        if result is None:  # removed, switched off or refused since this process last looked
            self._names_at = float("-inf")
            raise UnknownToolError(name)
        return result


def register(server: MCPServer) -> None:
    assert isinstance(server, RewindMCPServer)  # build_server makes every server of this project
    server.add_tool_provider(GatewayTools())
