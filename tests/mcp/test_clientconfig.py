"""Client configurations: each is what its client accepts, and the generic one really connects."""

from __future__ import annotations

import hashlib
import json
import shlex
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from rewind.agents.models import AgentToken
from rewind.mcp.clientconfig import CLIENTS, client_config
from tests.helpers import run
from tests.mcpfixtures import open_mcp_client

URL = "https://rewind.example.com/mcp"
TOKEN = "rwd_example-token"


def _config_json(client: str) -> dict[str, Any]:
    return json.loads(client_config(client, url=URL, token=TOKEN).config)


@pytest.mark.parametrize(
    ("client", "servers_key"),
    [
        ("claude-desktop", "mcpServers"),
        ("vscode", "servers"),
        ("cursor", "mcpServers"),
        ("opencode", "mcp"),
        ("json", "mcpServers"),
    ],
)
def test_each_json_configuration_parses_and_names_the_server(client: str, servers_key: str) -> None:
    data = _config_json(client)
    entry = data[servers_key]["zerto-rewind"]
    assert isinstance(entry, dict)


@pytest.mark.parametrize("client", ["vscode", "cursor", "opencode", "json"])
def test_remote_clients_get_the_url_and_the_bearer_header(client: str) -> None:
    data = _config_json(client)
    entry = next(iter(next(v for k, v in data.items() if k != "$schema").values()))
    assert entry["url"] == URL
    assert entry["headers"] == {"Authorization": f"Bearer {TOKEN}"}
    if client in ("vscode", "json"):
        assert entry["type"] == "http"
    if client == "opencode":
        assert (entry["type"], entry["enabled"]) == ("remote", True)


def test_claude_desktop_bridges_stdio_to_the_remote_server() -> None:
    entry = _config_json("claude-desktop")["mcpServers"]["zerto-rewind"]
    assert entry["command"] == "npx"
    assert entry["args"][:3] == ["-y", "mcp-remote", URL]
    # The header goes through the environment, so no argument carries a space.
    assert entry["args"][3:] == ["--header", "Authorization:${ZERTO_REWIND_AUTH}"]
    assert entry["env"] == {"ZERTO_REWIND_AUTH": f"Bearer {TOKEN}"}


def test_claude_code_gets_a_command_line_that_splits_into_the_right_arguments() -> None:
    config = client_config("claude-code", url=URL, token=TOKEN)
    assert shlex.split(config.config) == [
        "claude",
        "mcp",
        "add",
        "--transport",
        "http",
        "zerto-rewind",
        URL,
        "--header",
        f"Authorization: Bearer {TOKEN}",
    ]
    assert "~/.claude/skills/" in config.as_text()


def test_every_client_says_where_its_configuration_and_skill_go() -> None:
    for client in CLIENTS:
        text = client_config(client, url=URL, token=TOKEN).as_text()
        assert "Put this in" in text
        assert "kill" in text
        assert "out of version control" in text


def test_an_unknown_client_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unknown client 'emacs'; choose one of claude-code"):
        client_config("emacs", url=URL, token=TOKEN)


def _printed_json(out: str) -> dict[str, Any]:
    # The configuration sits between the "Put this in" comment and the skill comments.
    body = "\n".join(line for line in out.splitlines() if not line.startswith("#"))
    return json.loads(body)


def test_mcpconfig_issues_a_token_and_its_output_connects_a_client(
    mcp_server: Any, transactional_db: None, owner: Any
) -> None:
    out, err = StringIO(), StringIO()
    call_command("mcpconfig", "cfg-bot", "--client", "json", "--url", mcp_server.mcp_url, stdout=out, stderr=err)
    assert "created agent cfg-bot" in err.getvalue()
    entry = _printed_json(out.getvalue())["mcpServers"]["zerto-rewind"]
    assert entry["url"] == mcp_server.mcp_url
    token = entry["headers"]["Authorization"].removeprefix("Bearer ")
    assert AgentToken.objects.get(agent__name="cfg-bot").token_hash == hashlib.sha256(token.encode()).hexdigest()

    async def tool_names() -> set[str]:
        async with open_mcp_client(entry["url"], token) as client:
            return {tool.name for tool in (await client.list_tools()).tools}

    assert {"zerto_guard_before_mutate", "zerto_recover_file"} <= run(tool_names())
    # A second run for the same agent issues another token; the first one keeps working.
    call_command(
        "mcpconfig", "cfg-bot", "--client", "cursor", "--url", mcp_server.mcp_url, stdout=StringIO(), stderr=StringIO()
    )
    assert AgentToken.objects.filter(agent__name="cfg-bot").count() == 2


def test_mcpconfig_refuses_an_unknown_client_and_a_bad_url(db: None, owner: Any) -> None:
    with pytest.raises(CommandError, match="invalid choice: 'emacs'"):
        call_command("mcpconfig", "cfg-bot", "--client", "emacs", stdout=StringIO(), stderr=StringIO())
    with pytest.raises(CommandError, match="--url must be an http"):
        call_command("mcpconfig", "cfg-bot", "--url", "ftp://x/mcp", stdout=StringIO(), stderr=StringIO())
    assert not AgentToken.objects.exists()


@pytest.fixture
def owner(db: None) -> Any:
    from django.contrib.auth import get_user_model

    return get_user_model().objects.create_superuser("root-owner", password="pw-root-owner-1")
