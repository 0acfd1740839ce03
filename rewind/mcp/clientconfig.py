"""Ready-to-paste configurations that connect an MCP client to this service.

One function per client, each returning what that client accepts as it is: its own JSON
shape (or command line) with the remote URL and the bearer header, or, for Claude Desktop,
which runs only local commands from its file, the usual stdio bridge (``mcp-remote``) to a
remote server. Each also says where the client keeps the configuration and where it loads
Agent Skills from, so the skill in ``skills/zerto-rewind/`` can go beside it.

The token is written into the configuration: the text is shown once, to the person who
asked for it, and says that the file now holds a secret.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

SERVER_KEY = "zerto-rewind"

# What each client is called, by the key that picks it (``--client``, the admin page's choice).
CLIENT_TITLES: dict[str, str] = {
    "claude-code": "Claude Code",
    "claude-desktop": "Claude Desktop",
    "vscode": "VS Code (GitHub Copilot agent mode)",
    "cursor": "Cursor",
    "opencode": "OpenCode",
    "json": "Any MCP client with streamable HTTP",
}


@dataclass(frozen=True)
class ClientConfig:
    client: str
    title: str
    config: str  # what to paste (JSON, or a command line)
    where: str  # where the client keeps it
    skill_dirs: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def as_text(self) -> str:
        lines = [f"# {self.title}", f"# Put this in {self.where}:", "", self.config, ""]
        if self.skill_dirs:
            lines.append(
                "# The skill (skills/zerto-rewind/SKILL.md of this service) goes in a folder zerto-rewind/ under:"
            )
            lines += [f"#   {d}" for d in self.skill_dirs]
        lines += [f"# {note}" for note in self.notes]
        return "\n".join(lines).rstrip() + "\n"


def _json(data: object) -> str:
    return json.dumps(data, indent=2)


def _secret_note() -> str:
    return "This configuration holds the agent's bearer token: keep the file out of version control."


def claude_code(url: str, token: str) -> ClientConfig:
    command = f'claude mcp add --transport http {SERVER_KEY} {url} --header "Authorization: Bearer {token}"'
    project_file = _json(
        {"mcpServers": {SERVER_KEY: {"type": "http", "url": url, "headers": {"Authorization": f"Bearer {token}"}}}}
    )
    return ClientConfig(
        "claude-code",
        CLIENT_TITLES["claude-code"],
        command,
        "a shell (or, for one project, its .mcp.json:\n\n" + project_file + "\n)",
        ["~/.claude/skills/ (every project)", ".claude/skills/ (one project)"],
        [_secret_note()],
    )


def claude_desktop(url: str, token: str) -> ClientConfig:
    # Claude Desktop starts local commands only from its file; mcp-remote bridges stdio to
    # the remote server. The header comes from an environment variable: a space inside an
    # argument is split apart on some platforms.
    config = _json(
        {
            "mcpServers": {
                SERVER_KEY: {
                    "command": "npx",
                    "args": ["-y", "mcp-remote", url, "--header", "Authorization:${ZERTO_REWIND_AUTH}"],
                    "env": {"ZERTO_REWIND_AUTH": f"Bearer {token}"},
                }
            }
        }
    )
    return ClientConfig(
        "claude-desktop",
        CLIENT_TITLES["claude-desktop"],
        config,
        "claude_desktop_config.json (macOS: ~/Library/Application Support/Claude/, Windows: %APPDATA%\\Claude\\)",
        [],
        [
            "Skills: zip the folder skills/zerto-rewind and upload it in Settings > Capabilities > Skills.",
            "Needs Node.js (npx) on that machine.",
            _secret_note(),
        ],
    )


def vscode(url: str, token: str) -> ClientConfig:
    config = _json(
        {"servers": {SERVER_KEY: {"type": "http", "url": url, "headers": {"Authorization": f"Bearer {token}"}}}}
    )
    return ClientConfig(
        "vscode",
        CLIENT_TITLES["vscode"],
        config,
        ".vscode/mcp.json of a workspace, or the user configuration (command: MCP: Open User Configuration)",
        [".github/skills/ (one repository)", "~/.copilot/skills/ (every workspace)"],
        [_secret_note()],
    )


def cursor(url: str, token: str) -> ClientConfig:
    config = _json({"mcpServers": {SERVER_KEY: {"url": url, "headers": {"Authorization": f"Bearer {token}"}}}})
    return ClientConfig(
        "cursor",
        CLIENT_TITLES["cursor"],
        config,
        "~/.cursor/mcp.json (every project) or .cursor/mcp.json (one project)",
        [".cursor/skills/ (one project)", "~/.cursor/skills/ (every project)"],
        [_secret_note()],
    )


def opencode(url: str, token: str) -> ClientConfig:
    config = _json(
        {
            "$schema": "https://opencode.ai/config.json",
            "mcp": {
                SERVER_KEY: {
                    "type": "remote",
                    "url": url,
                    "enabled": True,
                    "headers": {"Authorization": f"Bearer {token}"},
                }
            },
        }
    )
    return ClientConfig(
        "opencode",
        CLIENT_TITLES["opencode"],
        config,
        "opencode.json of a project, or ~/.config/opencode/opencode.json",
        [".opencode/skills/ (one project)", "~/.config/opencode/skills/ (every project)"],
        [_secret_note()],
    )


def generic_json(url: str, token: str) -> ClientConfig:
    config = _json(
        {"mcpServers": {SERVER_KEY: {"type": "http", "url": url, "headers": {"Authorization": f"Bearer {token}"}}}}
    )
    return ClientConfig(
        "json",
        CLIENT_TITLES["json"],
        config,
        "the client's MCP server list",
        [".agents/skills/ or ~/.agents/skills/ (clients that follow the Agent Skills standard)"],
        [_secret_note()],
    )


CLIENTS: dict[str, Callable[[str, str], ClientConfig]] = {
    "claude-code": claude_code,
    "claude-desktop": claude_desktop,
    "vscode": vscode,
    "cursor": cursor,
    "opencode": opencode,
    "json": generic_json,
}


def client_config(client: str, *, url: str, token: str) -> ClientConfig:
    """The configuration for ``client`` (a key of ``CLIENTS``); ValueError for another name."""
    try:
        render = CLIENTS[client]
    except KeyError:
        raise ValueError(f"unknown client {client!r}; choose one of {', '.join(CLIENTS)}") from None
    return render(url, token)
