"""The JSON-RPC envelope of a POST to /mcp, checked before the SDK sees it.

The SDK answers a malformed envelope differently per protocol era (the handshake era with pydantic's report,
quoting the input); the spec names -32700 for a body that is not JSON and -32600 for JSON that is not one
JSON-RPC message, so both eras get those, with one short sentence. Only the envelope is checked. The body is
parsed once, with the SDK's own parser, so both accept the same bodies (and a deep one is a parse error here,
never a ``RecursionError`` further on).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pydantic_core

from rewind.mcp.errors import describe, excerpt

PARSE_ERROR = -32700
INVALID_REQUEST = -32600


@dataclass(frozen=True)
class Envelope:
    """What the guard needs of a parsed body: its id and method, or why it is refused."""

    rpc_id: Any = None
    method: str | None = None
    error_code: int | None = None
    error: str = ""


def _parsed(body: bytes) -> tuple[Any, str | None]:
    try:
        return pydantic_core.from_json(body), None
    except ValueError as exc:  # not JSON, not UTF-8, a lone surrogate, nested or numbered past the parser's limits
        return None, f"parse error: the body is not JSON the server reads ({excerpt(str(exc), 80)[1:-1]})"


def _id_problem(message: dict[str, Any]) -> str | None:
    if "id" not in message:
        return None
    rpc_id = message["id"]
    if isinstance(rpc_id, str) or (isinstance(rpc_id, int) and not isinstance(rpc_id, bool)):
        return None
    return f"invalid request: id must be a string or an integer (got {describe(rpc_id)})"


def _shape_problem(message: Any) -> str | None:
    if isinstance(message, list):
        return "invalid request: batches are not supported; send one JSON-RPC message per POST"
    if not isinstance(message, dict):
        return f"invalid request: the body must be one JSON-RPC message object (got {describe(message)})"
    if "jsonrpc" not in message:
        return 'invalid request: not a JSON-RPC 2.0 message ("jsonrpc": "2.0" is missing)'
    if message.get("jsonrpc") != "2.0":
        return f'invalid request: "jsonrpc" must be "2.0" (got {describe(message.get("jsonrpc"))})'
    if (problem := _id_problem(message)) is not None:
        return problem
    if "method" in message:
        method = message["method"]
        if not isinstance(method, str):
            return f"invalid request: method must be a string (got {describe(method)})"
        if "params" in message and not isinstance(message["params"], dict):
            return f"invalid request: params must be an object (got {describe(message['params'])})"
        return None
    if "id" in message and ("result" in message) != ("error" in message):
        return None  # a response to a request of the server's
    keys = ", ".join(excerpt(str(k), 20) for k in list(message)[:5]) or "no members"
    return f"invalid request: neither a request (no method) nor a response; the object has {keys}"


def read_envelope(body: bytes) -> Envelope:
    """The envelope of ``body``, with ``error_code`` set (-32700 or -32600) when it is refused."""
    message, parse_error = _parsed(body)
    if parse_error is not None:
        return Envelope(error_code=PARSE_ERROR, error=parse_error)
    problem = _shape_problem(message)
    rpc_id = message.get("id") if isinstance(message, dict) and _id_problem(message) is None else None
    method = message.get("method") if isinstance(message, dict) else None
    if problem is not None:
        return Envelope(rpc_id=rpc_id, error_code=INVALID_REQUEST, error=problem)
    return Envelope(rpc_id=rpc_id, method=method if isinstance(method, str) else None)
