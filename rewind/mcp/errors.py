"""Plain-language errors for bad input: one sentence per bad argument, and short excerpts only.

An agent reads the text of the tool error, and the SDK's is pydantic's multi-line report quoting the whole
input; here each bad argument gets its name, what was wrong (with an excerpt) and what is accepted, e.g.
``confirmed: must be JSON true (got the string 'yes'); expected: <the parameter's description>``.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

EXCERPT_CHARS = 40


def excerpt(value: str, limit: int = EXCERPT_CHARS) -> str:
    """``value`` quoted, cut to ``limit`` characters with its length said when it was cut."""
    if len(value) <= limit:
        return repr(value)
    return f"{value[:limit]!r}… ({len(value)} characters)"


# The tools an unknown tool's answer names at most; tools/list names them all.
NAMED_TOOLS_MAX = 40


class UnknownToolError(Exception):
    """A tool this server does not have (now); the server answers it as ``unknown_tool_message`` says."""


def unknown_tool_message(name: str, tools: list[str]) -> str:
    """An unknown tool's answer, as a tool error the model reads (SDK clients raise a JSON-RPC error
    instead of handing it over): what was asked for, a close name, and the tools this caller may call."""
    close = difflib.get_close_matches(name, tools, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    named = ", ".join(tools[:NAMED_TOOLS_MAX])
    more = (
        f" and {len(tools) - NAMED_TOOLS_MAX} more (tools/list names them all)" if len(tools) > NAMED_TOOLS_MAX else ""
    )
    return f"unknown tool {excerpt(name)}{hint}; the tools you may call are: {named}{more}"


def describe(value: Any) -> str:
    """What a JSON value is, in words, with a short excerpt: "the string 'yes'", "the number 1"."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {'true' if value else 'false'}"
    if isinstance(value, (int, float)):
        return f"the number {excerpt(json.dumps(value))[1:-1]}"
    if isinstance(value, str):
        return f"the string {excerpt(value)}" if value else "an empty string"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, (list, tuple)):
        return "an array"
    return f"a {type(value).__name__}"


_EXPECTED = {
    "bool_type": "must be JSON true or false",
    "int_type": "must be a JSON integer",
    "int_parsing": "must be a JSON integer",
    "int_from_float": "must be a whole JSON integer",
    "float_type": "must be a JSON number",
    "float_parsing": "must be a JSON number",
    "string_type": "must be a JSON string",
    "dict_type": "must be a JSON object",
    "list_type": "must be a JSON array",
    "string_too_short": "must not be empty",
    "string_pattern_mismatch": "must hold at least one character that is not white space",
}


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _problem(error: Mapping[str, Any]) -> str:
    kind = error.get("type", "")
    ctx = error.get("ctx") or {}
    if kind == "greater_than_equal":
        return f"must be at least {_number(ctx.get('ge'))}"
    if kind == "less_than_equal":
        return f"must be at most {_number(ctx.get('le'))}"
    if kind == "greater_than":
        return f"must be more than {_number(ctx.get('gt'))}"
    if kind == "less_than":
        return f"must be less than {_number(ctx.get('lt'))}"
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected', '')}"
    if kind == "string_too_long":
        return f"must be at most {ctx.get('max_length')} characters long"
    return _EXPECTED.get(kind) or str(error.get("msg", "is not valid")).rstrip(".").lower()


def _sentence(name: str, error: Mapping[str, Any], prop: Mapping[str, Any]) -> str:
    if error.get("type") == "missing":
        sentence = f"{name}: missing; it is required"
    else:
        problem = _problem(error)
        if name == "confirmed" and error.get("type") == "bool_type":
            problem = "must be JSON true"
        sentence = f"{name}: {problem} (got {describe(error.get('input'))})"
    hint = prop.get("description")
    if isinstance(hint, str) and hint:
        sentence += f"; expected: {hint.rstrip('.')}"
    return sentence + "."


def validation_message(exc: ValidationError, properties: Mapping[str, Any]) -> str:
    """One sentence per bad argument (the first problem of each), in the order pydantic found them; ``properties``
    is the tool's input schema's, whose descriptions say what is accepted."""
    sentences: dict[str, str] = {}
    for error in exc.errors():
        loc = error.get("loc") or ("arguments",)
        name = str(loc[0])
        if name not in sentences:
            prop = properties.get(name)
            sentences[name] = _sentence(
                excerpt(name)[1:-1] if len(name) > EXCERPT_CHARS else name,
                error,
                prop if isinstance(prop, Mapping) else {},
            )
    return " ".join(sentences.values())


def _closest(name: str, known: list[str]) -> str | None:
    by_lower = {k.lower(): k for k in known}
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=0.6)
    return by_lower[close[0]] if close else None


def unknown_arguments_message(tool: str, unknown: list[str], known: list[str]) -> str:
    """One sentence per argument ``tool`` does not take, with the closest one it does: an agent that misspells
    ``change_id`` must hear so, not get a new guard."""
    sentences = []
    for name in unknown:
        shown = excerpt(name)[1:-1] if len(name) > EXCERPT_CHARS else name
        sentence = f"{tool} has no argument `{shown}`"
        closest = _closest(name, known)
        sentences.append(sentence + (f"; did you mean `{closest}`?" if closest else "."))
    takes = ", ".join(known) if known else "none"
    return " ".join(sentences) + f" Its arguments: {takes}. Nothing was done."
