"""The names agents call upstream tools by: ``<server>__<tool>``, in the alphabet every host accepts.

The MCP spec allows ``.`` and ``/`` in tool names, but the model APIs behind the hosts do not:
Claude wants ``^[a-zA-Z0-9_-]{1,128}$``, OpenAI-style functions and Windsurf the same within 64,
and Claude Code prefixes ``mcp__<server>__`` and needs the whole within 64. So an exposed name
uses only ``[A-Za-z0-9_-]`` and at most ``MAX_LEN`` characters, which leaves Claude Code room for
a server name of up to 17 characters. A longer name keeps its head and ends in a hash of the
full ``server/tool``, so the same tool always gets the same name on every worker.
"""

from __future__ import annotations

import hashlib
import re

MAX_LEN = 40
SEPARATOR = "__"
HASH_LEN = 8
_OUTSIDE_ALPHABET = re.compile(r"[^A-Za-z0-9_-]")
UPSTREAM_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,29}$")
UPSTREAM_NAME_RULE = "1 to 30 characters: lower-case letters, digits, - and _, starting with a letter or digit"


def exposed_name(server: str, tool: str) -> str:
    """``server__tool`` with other characters as ``_``; shortened to ``MAX_LEN`` with a hash suffix."""
    name = _OUTSIDE_ALPHABET.sub("_", f"{server}{SEPARATOR}{tool}")
    if len(name) <= MAX_LEN:
        return name
    digest = hashlib.sha256(f"{server}/{tool}".encode()).hexdigest()[:HASH_LEN]
    return f"{name[: MAX_LEN - HASH_LEN - 1]}_{digest}"


def catalog_name(server: str, tool: str) -> str:
    """The catalog's spelling of the same tool (``server/tool``, lower case)."""
    return f"{server}/{tool}".lower()
