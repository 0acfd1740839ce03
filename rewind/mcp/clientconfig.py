"""Ready-to-paste configurations that connect an MCP client to this service.

One function per client, each returning what that client accepts as it is: the remote URL and a bearer token
placed where the client reads a secret, so the file holds none where the client allows it, or the URL alone for
OAuth sign-in (the only way hosted connectors connect). ``config`` is exactly what to paste; ``guide()`` says
the rest, including where the client loads Agent Skills from.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

SERVER_KEY = "zerto-rewind"
TOKEN_ENV = "ZERTO_REWIND_TOKEN"

# What each client is called, by the key that picks it (``--client``, the admin page's choice).
CLIENT_TITLES: dict[str, str] = {
    "claude-code": "Claude Code",
    "claude-desktop": "Claude Desktop",
    "vscode": "VS Code (GitHub Copilot agent mode)",
    "cursor": "Cursor",
    "opencode": "OpenCode",
    "json": "Any MCP client with streamable HTTP",
    "claude-ai": "claude.ai connector (OAuth sign-in)",
    "chatgpt": "ChatGPT connector (OAuth sign-in)",
}
# Hosted connectors connect only through the MCP authorization flow: they get the URL and no token.
OAUTH_ONLY = frozenset({"claude-ai", "chatgpt"})


@dataclass(frozen=True)
class ClientConfig:
    client: str
    title: str
    config: str  # what to paste, as it is (JSON, or a command line)
    where: str  # where the client keeps it
    token_step: str = ""  # how the client gets the token ("" with OAuth: a person signs in when it connects)
    also: tuple[tuple[str, str], ...] = ()  # other ways, each (where, what to paste as it is)
    skill_dirs: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def guide(self) -> str:
        """Everything around ``config``: where it goes, the token, other ways, the skill, notes."""
        lines = [f"# {self.title}: put the configuration in {self.where}."]
        if self.token_step:
            lines.append(f"# The token (shown once): {self.token_step}")
        else:
            lines.append(
                "# No token: when the client first connects, it opens a browser where you sign in and pick the "
                "agent it acts as."
            )
        for where, text in self.also:
            lines += ["", f"# Or, {where}:", "", text, ""]
        if self.skill_dirs:
            lines.append(
                "# The skill (skills/zerto-rewind/SKILL.md of this service) goes in a folder zerto-rewind/ under:"
            )
            lines += [f"#   {d}" for d in self.skill_dirs]
        lines += [f"# {note}" for note in self.notes]
        return "\n".join(lines).rstrip() + "\n"

    def as_text(self) -> str:
        return f"{self.config}\n\n{self.guide()}"


def _json(data: object) -> str:
    return json.dumps(data, indent=2)


def _export(token: str) -> str:
    return f"export {TOKEN_ENV}='{token}'   (in the environment the client starts from)"


def _oauth_note() -> str:
    return "Without a token: leave the header out and the client signs in with OAuth (mcpconfig --oauth)."


def claude_code(url: str, token: str | None) -> ClientConfig:
    command = f"claude mcp add --transport http {SERVER_KEY} {url}"
    if token is not None:
        # The shell reads the variable when the server is added, into the person's own configuration.
        # Not ${VAR} in a project's .mcp.json: some Claude Code versions send a header's ${VAR} unexpanded.
        command += f' --header "Authorization: Bearer ${TOKEN_ENV}"'
    # A project's file to share holds no secret: each person signs in.
    project_file = _json({"mcpServers": {SERVER_KEY: {"type": "http", "url": url}}})
    return ClientConfig(
        "claude-code",
        CLIENT_TITLES["claude-code"],
        command,
        "a shell (it adds the server to your own Claude Code configuration)",
        _export(token) if token is not None else "",
        (("for a project everyone shares, its .mcp.json (no secret: each person signs in with /mcp)", project_file),),
        ["~/.claude/skills/ (every project)", ".claude/skills/ (one project)"],
        ["In Claude Code, run /mcp and pick zerto-rewind to sign in."] if token is None else [],
    )


def claude_desktop(url: str, token: str | None) -> ClientConfig:
    if token is None:
        return _connector(
            "claude-desktop", "Settings > Connectors > Add custom connector (the URL only)", _SKILL_UPLOAD
        )(url, None)
    # Claude Desktop starts local commands only from its file, with only the environment that file
    # gives them: the token goes in it. mcp-remote bridges stdio to the remote server; the header
    # comes from a variable, since a space inside an argument is split apart on some platforms.
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
        "it is in the configuration above: Claude Desktop gives a local command no other environment.",
        (),
        [],
        [
            _SKILL_UPLOAD,
            "Needs Node.js (npx) on that machine. The file holds the token: keep it to yourself.",
            "Without a token or Node.js: add the URL as a custom connector and sign in (mcpconfig --oauth).",
        ],
    )


def vscode(url: str, token: str | None) -> ClientConfig:
    server: dict[str, object] = {"type": "http", "url": url}
    data: dict[str, object] = {"servers": {SERVER_KEY: server}}
    if token is not None:
        # VS Code asks once and keeps the answer in its secret storage.
        server["headers"] = {"Authorization": "Bearer ${input:zerto-rewind-token}"}
        data = {
            "inputs": [
                {
                    "type": "promptString",
                    "id": "zerto-rewind-token",
                    "description": "zerto-rewind agent token",
                    "password": True,
                }
            ],
            **data,
        }
    return ClientConfig(
        "vscode",
        CLIENT_TITLES["vscode"],
        _json(data),
        ".vscode/mcp.json of a workspace, or the user configuration (command: MCP: Open User Configuration)",
        f"VS Code asks for it when it first starts the server; paste {token}" if token is not None else "",
        (),
        [".github/skills/ (one repository)", "~/.copilot/skills/ (every workspace)"],
        [_oauth_note()] if token is not None else [],
    )


def cursor(url: str, token: str | None) -> ClientConfig:
    server: dict[str, object] = {"url": url}
    if token is not None:
        server["headers"] = {"Authorization": f"Bearer ${{env:{TOKEN_ENV}}}"}
    return ClientConfig(
        "cursor",
        CLIENT_TITLES["cursor"],
        _json({"mcpServers": {SERVER_KEY: server}}),
        "~/.cursor/mcp.json (every project) or .cursor/mcp.json (one project)",
        _export(token) if token is not None else "",
        (),
        [".cursor/skills/ (one project)", "~/.cursor/skills/ (every project)"],
        [_oauth_note()] if token is not None else [],
    )


def opencode(url: str, token: str | None) -> ClientConfig:
    server: dict[str, object] = {"type": "remote", "url": url, "enabled": True}
    if token is not None:
        server["headers"] = {"Authorization": f"Bearer {{env:{TOKEN_ENV}}}"}
    return ClientConfig(
        "opencode",
        CLIENT_TITLES["opencode"],
        _json({"$schema": "https://opencode.ai/config.json", "mcp": {SERVER_KEY: server}}),
        "opencode.json of a project, or ~/.config/opencode/opencode.json",
        _export(token) if token is not None else "",
        (),
        [".opencode/skills/ (one project)", "~/.config/opencode/skills/ (every project)"],
        [_oauth_note()] if token is not None else ["Sign in with: opencode mcp auth zerto-rewind"],
    )


def generic_json(url: str, token: str | None) -> ClientConfig:
    server: dict[str, object] = {"type": "http", "url": url}
    if token is not None:
        server["headers"] = {"Authorization": f"Bearer {token}"}
    return ClientConfig(
        "json",
        CLIENT_TITLES["json"],
        _json({"mcpServers": {SERVER_KEY: server}}),
        "the client's MCP server list",
        "it is in the header above: keep the file out of version control." if token is not None else "",
        (),
        [".agents/skills/ or ~/.agents/skills/ (clients that follow the Agent Skills standard)"],
        [],
    )


_SKILL_UPLOAD = "Skills: zip the folder skills/zerto-rewind and upload it in Settings > Capabilities > Skills."


def _unreachable_from_outside(url: str) -> list[str]:
    """Why a hosted connector, which calls from the internet over https, cannot use ``url``: [] when it may."""
    parts = urlsplit(url)
    why = [] if parts.scheme == "https" else [f"it is plain {parts.scheme}, not https"]
    host = (parts.hostname or "").lower()
    try:
        local = not ipaddress.ip_address(host).is_global
    except ValueError:
        local = host == "localhost" or host.endswith(".localhost")
    if local:
        why.append(f"{host} is an address of this machine or its network, not one the internet reaches")
    return why


def _public_note(client: str, url: str) -> str:
    why = _unreachable_from_outside(url)
    if not why:
        return f"{CLIENT_TITLES[client]} calls this URL from the internet: it must reach this service there."
    return (
        f"This URL will NOT work for {CLIENT_TITLES[client]}, which calls from the internet over https: "
        f"{'; '.join(why)}. Set REWIND_PUBLIC_URL to the public https address this service is reached at "
        "(a TLS reverse proxy in front of it) and print the configuration again."
    )


def _connector(client: str, where: str, skill: str) -> Callable[[str, str | None], ClientConfig]:
    def render(url: str, token: str | None) -> ClientConfig:
        return ClientConfig(client, CLIENT_TITLES[client], url, where, notes=[skill, _public_note(client, url)])

    return render


CLIENTS: dict[str, Callable[[str, str | None], ClientConfig]] = {
    "claude-code": claude_code,
    "claude-desktop": claude_desktop,
    "vscode": vscode,
    "cursor": cursor,
    "opencode": opencode,
    "json": generic_json,
    "claude-ai": _connector(
        "claude-ai", "claude.ai, Settings > Connectors > Add custom connector (the URL only)", _SKILL_UPLOAD
    ),
    "chatgpt": _connector(
        "chatgpt",
        "ChatGPT, Settings > Connectors > Create (the URL, authentication OAuth)",
        "ChatGPT loads no Agent Skills: the server offers the skill as its prompt zerto-rewind.",
    ),
}


def client_config(client: str, *, url: str, token: str | None) -> ClientConfig:
    """The configuration for ``client`` (a key of ``CLIENTS``): with ``token``, or for OAuth sign-in when it
    is None (always for ``OAUTH_ONLY`` clients). ValueError for another name."""
    try:
        render = CLIENTS[client]
    except KeyError:
        raise ValueError(f"unknown client {client!r}; choose one of {', '.join(CLIENTS)}") from None
    return render(url, None if client in OAUTH_ONLY else token)
