"""Reading a client configuration as that client reads it: the URL it calls and the headers it sends.

Each client's own syntax for a secret is resolved as its documentation says (Claude Code's shell and
``${VAR}``, Cursor's ``${env:VAR}``, OpenCode's ``{env:VAR}``, VS Code's ``${input:id}`` prompt,
mcp-remote's ``${VAR}`` in arguments); ``secret`` is what the person gives it (the variable's value or
the answer to the prompt). Anything left unresolved fails the test.
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

from rewind.mcp.clientconfig import SERVER_KEY, TOKEN_ENV

TOKEN_RE = re.compile(r"rwd_[A-Za-z0-9_-]{20,}")


def token_in(text: str) -> str:
    found = TOKEN_RE.findall(text)
    assert len(set(found)) == 1, text
    return found[0]


def _unresolved(value: str) -> None:
    assert "$" not in value, f"left unresolved: {value}"
    assert "{env:" not in value, f"left unresolved: {value}"


def connection_of(client: str, config: str, secret: str | None) -> tuple[str, dict[str, str]]:
    """(url, headers) the client sends after reading ``config``."""
    if client in ("claude-ai", "chatgpt") or (client == "claude-desktop" and config.startswith("http")):
        return config.strip(), {}
    if client == "claude-code":
        words = shlex.split(config.replace(f"${TOKEN_ENV}", secret or ""))
        assert words[:6] == ["claude", "mcp", "add", "--transport", "http", SERVER_KEY]
        headers = dict(_header(words[8])) if len(words) > 7 and words[7] == "--header" else {}
        return words[6], headers
    data = json.loads(config)
    servers = {"vscode": "servers", "opencode": "mcp"}.get(client, "mcpServers")
    entry: dict[str, Any] = data[servers][SERVER_KEY]
    if client == "claude-desktop":
        env = entry["env"]
        args = [re.sub(r"\$\{(\w+)\}", lambda m: env[m.group(1)], a) for a in entry["args"]]
        assert args[:2] == ["-y", "mcp-remote"]
        headers = dict(_header(args[4], sep=":")) if len(args) > 4 else {}
        return args[2], headers
    headers = dict(entry.get("headers") or {})
    for name, value in headers.items():
        if client == "vscode":
            inputs = {i["id"]: i for i in data.get("inputs", [])}
            for key in re.findall(r"\$\{input:([\w-]+)\}", value):
                assert inputs[key]["password"] is True  # kept in VS Code's secret storage
                value = value.replace(f"${{input:{key}}}", secret or "")
        value = value.replace(f"${{env:{TOKEN_ENV}}}", secret or "") if client == "cursor" else value
        value = value.replace(f"{{env:{TOKEN_ENV}}}", secret or "") if client == "opencode" else value
        _unresolved(value)
        headers[name] = value
    return entry["url"], headers


def _header(text: str, sep: str = ": ") -> list[tuple[str, str]]:
    name, _, value = text.partition(sep)
    _unresolved(value)
    return [(name.strip(), value.strip())]
