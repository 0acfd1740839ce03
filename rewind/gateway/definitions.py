"""A tool's definition as pinned: what a person approved, its digest, and what changed since.

An upstream may change a tool between two listings (a new description that tells the model to
do something else, a schema that takes one more argument): the gateway lists and forwards a
tool only while its definition is the one a person approved. The definition is the tool's name,
title, description, input and output schema and annotations (its ``_meta`` is the upstream's
own business); the digest is SHA-256 over its canonical JSON (sorted keys, no spaces, UTF-8).
"""

from __future__ import annotations

import difflib
import hashlib
import json
from typing import Any, Protocol


class Definable(Protocol):
    name: str
    title: str
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None
    annotations: dict[str, Any] | None


def definition(tool: Definable) -> dict[str, Any]:
    return {
        "name": tool.name,
        "title": tool.title,
        "description": tool.description,
        "inputSchema": tool.input_schema,
        "outputSchema": tool.output_schema,
        "annotations": tool.annotations,
    }


def digest(defined: dict[str, Any]) -> str:
    canonical = json.dumps(defined, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _lines(defined: dict[str, Any] | None) -> list[str]:
    if defined is None:
        return []
    return json.dumps(defined, sort_keys=True, indent=2, ensure_ascii=False).splitlines()


def definition_diff(approved: dict[str, Any] | None, listed: dict[str, Any]) -> str:
    """What changed since the approved definition, as a unified diff (all of it for a tool never approved)."""
    return "\n".join(
        difflib.unified_diff(
            _lines(approved), _lines(listed), "approved" if approved else "(never approved)", "listed now", lineterm=""
        )
    )
