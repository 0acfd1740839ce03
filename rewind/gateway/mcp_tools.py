"""The gateway's tools on /mcp: every enabled upstream's exported tools, under their exposed names.

The list comes from the database (what the last listing stored), so every worker and replica
answers the same in stateless mode; each process keeps it for ``TOOLS_TTL_S``. A name not in
the kept list is looked up again at once (at most every ``MISS_RECHECK_S``), so a tool listed
by another worker is callable without waiting out the period.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp_types import CallToolResult, ToolAnnotations
from mcp_types import Tool as MCPTool

from rewind.gateway.forward import forward_call
from rewind.gateway.links import UpstreamSpec
from rewind.gateway.models import UpstreamTool
from rewind.gateway.services import upstream_spec
from rewind.mcp.context import run_db
from rewind.mcp.server import RewindMCPServer

# After the zerto tools: agents read those first.
TOOLS_POSITION = 900
TOOLS_TTL_S = 5.0
MISS_RECHECK_S = 1.0


@dataclass(frozen=True)
class Exported:
    tool: UpstreamTool
    spec: UpstreamSpec

    def as_mcp(self) -> MCPTool:
        t = self.tool
        annotations = ToolAnnotations.model_validate(t.annotations) if t.annotations else None
        return MCPTool(
            name=t.exposed_name,
            title=t.title or None,
            description=f"[{t.upstream.name}/{t.name} via zerto-rewind] {t.description}".strip(),
            input_schema=t.input_schema or {"type": "object"},
            output_schema=t.output_schema,
            annotations=annotations,
            _meta=t.meta,
        )


def _load() -> dict[str, Exported]:
    rows = UpstreamTool.objects.filter(state=UpstreamTool.State.EXPORTED, upstream__enabled=True).select_related(
        "upstream"
    )
    specs: dict[int, UpstreamSpec] = {}
    out: dict[str, Exported] = {}
    for row in rows.order_by("upstream__name", "name"):
        spec = specs.get(row.upstream_id) or specs.setdefault(row.upstream_id, upstream_spec(row.upstream))
        out[row.exposed_name] = Exported(row, spec)
    return out


class ExportedTools:
    """Per process: the exported tools, kept for a few seconds."""

    def __init__(self) -> None:
        self._tools: dict[str, Exported] = {}
        self._loaded_at = float("-inf")

    async def get(self, *, fresh_after: float = TOOLS_TTL_S) -> dict[str, Exported]:
        if time.monotonic() - self._loaded_at >= fresh_after:
            self._tools = await run_db(_load)
            self._loaded_at = time.monotonic()
        return self._tools

    def forget(self) -> None:
        self._loaded_at = float("-inf")


exported_tools = ExportedTools()


class GatewayTools:
    async def tools(self) -> list[MCPTool]:
        return [e.as_mcp() for e in (await exported_tools.get()).values()]

    async def has(self, name: str) -> bool:
        if "__" not in name:  # every exposed name has the separator; the zerto tools never do
            return False
        if name in await exported_tools.get():
            return True
        return name in await exported_tools.get(fresh_after=MISS_RECHECK_S)

    async def call(self, name: str, arguments: dict[str, Any], context: Context | None) -> CallToolResult:
        exported = (await exported_tools.get())[name]
        return await forward_call(exported.tool, exported.spec, arguments, context)


def register(server: MCPServer) -> None:
    assert isinstance(server, RewindMCPServer)  # build_server makes every server of this project
    server.add_tool_provider(GatewayTools())
