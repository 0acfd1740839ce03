"""The tool list clients see: which tools, in which order, whichever part's module declares them."""

from __future__ import annotations

from rewind.agents.mcp_auth import AgentTokenStore
from rewind.mcp.server import build_server, tool_modules
from tests.helpers import run


def test_it_lists_the_guard_first_then_the_catalog_then_the_rest_in_app_order(db: None) -> None:
    # With no upstream configured the gateway adds nothing (tests/gateway covers its tools).
    tools = run(build_server(token_stores=[AgentTokenStore()]).list_tools())
    assert [t.name for t in tools] == [
        "zerto_create_tagged_checkpoint",
        "zerto_guard_before_mutate",
        "zerto_checkpoint_status",
        "zerto_held_call_status",
        "zerto_add_mutating_tool",
        "zerto_list_mutating_tools",
        "zerto_find_protection",
        "zerto_recover_file",
        "zerto_recovery_status",
        "zerto_list_flr_sessions",
        "zerto_end_flr_session",
    ]


def test_it_finds_each_parts_tools_module() -> None:
    assert set(tool_modules()) == {
        "rewind.checkpoints.mcp_tools",
        "rewind.protection.mcp_tools",
        "catalog.mcp_tools",
        "recoveries.mcp_tools",
        "rewind.gateway.mcp_tools",
    }


def test_every_tool_says_it_takes_no_undeclared_argument(db: None) -> None:
    tools = run(build_server(token_stores=[AgentTokenStore()]).list_tools())
    assert tools
    for tool in tools:
        assert tool.input_schema.get("additionalProperties") is False, tool.name
