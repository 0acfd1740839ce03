"""The agents' skill (skills/zerto-rewind/SKILL.md): the Agent Skills format, and that every tool
and argument it tells an agent to use is one the MCP server really offers."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from rewind.mcp.server import build_server
from tests.helpers import run

SKILL_DIR = Path(__file__).resolve().parents[2] / "skills" / "zerto-rewind"
SKILL = SKILL_DIR / "SKILL.md"
NAME_RULE = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
CALL = re.compile(r"\b(zerto_[a-z_]+)\(([^()]*)\)")
TOOL_NAME = re.compile(r"\bzerto_[a-z_]+\b")


def _parts() -> tuple[dict[str, Any], str]:
    text = SKILL.read_text(encoding="utf-8")
    match = re.match(r"^---\n(.*?)\n---\n(.*)$", text, re.DOTALL)
    assert match, "SKILL.md must start with YAML front matter between --- lines"
    front = yaml.safe_load(match.group(1))
    assert isinstance(front, dict)
    return front, match.group(2)


@pytest.fixture(scope="module")
def schemas(django_db_setup: None, django_db_blocker: Any) -> dict[str, dict[str, Any]]:
    from rewind.agents.mcp_auth import AgentTokenStore

    # The list reads the gateway's upstream tools from the database (none here: only ours).
    with django_db_blocker.unblock():
        tools = run(build_server(token_stores=[AgentTokenStore()]).list_tools())
    return {tool.name: tool.input_schema for tool in tools}


def test_the_front_matter_follows_the_agent_skills_rules() -> None:
    front, body = _parts()
    assert set(front) >= {"name", "description"}
    assert front["name"] == SKILL_DIR.name == "zerto-rewind"
    assert NAME_RULE.match(front["name"])
    assert len(front["name"]) <= 64
    description = front["description"]
    assert isinstance(description, str)
    assert 0 < len(description) <= 1024
    # It says what the skill does and when to use it.
    assert "Use it before" in description
    assert "file" in description
    assert len(body.splitlines()) <= 500


def test_every_tool_the_skill_names_exists(schemas: dict[str, dict[str, Any]], db: None) -> None:
    _, body = _parts()
    named = set(TOOL_NAME.findall(body))
    assert named, "the skill names no tool"
    assert named <= set(schemas), f"not offered by the server: {sorted(named - set(schemas))}"
    # And it teaches the whole protocol: guarding, status, recovery and sessions.
    assert {
        "zerto_guard_before_mutate",
        "zerto_checkpoint_status",
        "zerto_recover_file",
        "zerto_recovery_status",
        "zerto_end_flr_session",
    } <= named


def test_every_argument_the_skill_uses_is_in_that_tools_schema(schemas: dict[str, dict[str, Any]], db: None) -> None:
    _, body = _parts()
    calls = CALL.findall(body)
    assert len(calls) >= 8
    for tool, args in calls:
        used = set(re.findall(r"(?:^|,)\s*([a-z_]+)\s*=", args))
        schema = schemas[tool]
        allowed = set(schema.get("properties", {}))
        assert used <= allowed, f"{tool} has no argument(s) {sorted(used - allowed)}"
        missing = set(schema.get("required", [])) - used
        assert not missing, f"the skill calls {tool} without its required argument(s) {sorted(missing)}"
