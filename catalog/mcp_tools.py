"""The mutating-tool catalog's tools: an agent adds a tool that changes VMs, and reads the catalog the
guard consults; only a person changes, disables or removes an entry (in the admin)."""

from __future__ import annotations

from typing import Annotated, Literal

from mcp.server import MCPServer
from mcp_types import ToolAnnotations
from pydantic import Field, StrictStr

from catalog.presenters import MutatingToolListOut, MutatingToolOut
from catalog.services import mutating_tool_add, mutating_tool_list
from rewind.audit import Actor
from rewind.mcp import scopes
from rewind.mcp.context import current_agent_name, run_db

# Right after the guard's own tools: the guard's pass-through answer points the agent here.
TOOLS_POSITION = 20


def _add(tool: str, vm_arg: str, platform: str, description: str) -> MutatingToolOut:
    entry = mutating_tool_add(
        actor=Actor.agent(current_agent_name()), pattern=tool, vm_arg=vm_arg, platform=platform, description=description
    )
    return MutatingToolOut.model_validate(entry)


def _list() -> MutatingToolListOut:
    return MutatingToolListOut.model_validate({"tools": mutating_tool_list(include_disabled=True)})


async def zerto_add_mutating_tool(
    tool: Annotated[
        StrictStr,
        Field(
            description="The tool as server/tool, or server/* for every tool of that "
            'server, e.g. "docker/exec" or "docker/*"'
        ),
    ],
    vm_arg: Annotated[
        StrictStr,
        Field(description='The name of that tool\'s argument holding the VM (host name, VM name or IP), e.g. "host"'),
    ],
    description: Annotated[
        StrictStr,
        Field(
            description="What the tool changes, for the people who review the "
            'catalog, e.g. "runs Docker commands on a host"'
        ),
    ],
    platform: Annotated[
        Literal["linux", "windows", "any"],
        Field(description='The guests it changes, a JSON string: "linux", "windows" or "any" (default), e.g. "linux"'),
    ] = "any",
) -> MutatingToolOut:
    """Add a tool that changes VMs to the catalog, so zerto_guard_before_mutate checkpoints before it runs.

    `tool`: server/tool (e.g. ssh/exec) or server/* for every tool of a server. `vm_arg`: the name of that
    tool's argument holding the VM (host name, VM name or IP). Only a person can change, disable or remove
    an entry afterwards.
    """
    return await run_db(_add, tool, vm_arg, platform, description)


async def zerto_list_mutating_tools() -> MutatingToolListOut:
    """The mutating-tool catalog: every entry, its VM argument, platform and whether it is enabled."""
    return await run_db(_list)


def register(server: MCPServer) -> None:
    # Not idempotent: adding an entry that is there already is refused, not repeated.
    title = "Add a mutating tool to the catalog"
    server.tool(
        name="zerto_add_mutating_tool",
        title=title,
        meta=scopes.tool_meta(scopes.CATALOG),
        annotations=ToolAnnotations(
            title=title, read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
        ),
    )(zerto_add_mutating_tool)
    title = "List the mutating-tool catalog"
    server.tool(
        name="zerto_list_mutating_tools",
        title=title,
        meta=scopes.tool_meta(scopes.READ),
        annotations=ToolAnnotations(
            title=title, read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
        ),
    )(zerto_list_mutating_tools)
