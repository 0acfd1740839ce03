"""The scripted agent of ``manage.py demo``: MCP tool calls over streamable HTTP, made with the official SDK client
as any agent's host makes them. Not a command (the underscore).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx2
from mcp_types import CallToolResult, RequestParamsMeta


class AgentCallError(Exception):
    """The tool answered with an error, or the endpoint could not be reached."""


@dataclass(frozen=True)
class ScriptedAgent:
    mcp_url: str
    token: str

    def call(self, tool: str, arguments: dict[str, Any], on_message: Callable[[str], None] | None = None) -> Any:
        """One tool call in a session of its own (the endpoint is stateless); its structured answer."""
        return self.call_result(tool, arguments, on_message).structured_content

    def call_result(
        self,
        tool: str,
        arguments: dict[str, Any],
        on_message: Callable[[str], None] | None = None,
        *,
        meta: RequestParamsMeta | None = None,
        errors: bool = False,
    ) -> CallToolResult:
        """The whole result (its ``_meta`` too); raises ``AgentCallError`` when it is an error, unless
        ``errors`` (the caller reads the refusal itself). ``meta``: the request's ``_meta``."""
        # A thread of its own: a caller that already runs an event loop cannot nest asyncio.run.
        with ThreadPoolExecutor(1) as pool:
            return pool.submit(asyncio.run, self._call(tool, arguments, on_message, meta, errors)).result()

    async def _call(
        self,
        tool: str,
        arguments: dict[str, Any],
        on_message: Callable[[str], None] | None,
        meta: RequestParamsMeta | None = None,
        errors: bool = False,
    ) -> CallToolResult:
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        # The SDK passes these by name, so they keep its parameter names.
        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            if on_message is not None and message:
                on_message(message)

        headers = {"Authorization": f"Bearer {self.token}"}
        try:
            async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=660.0)) as http:
                transport = streamable_http_client(self.mcp_url, http_client=http)
                async with Client(transport, mode="auto") as client:
                    result = await client.call_tool(tool, arguments, progress_callback=on_progress, meta=meta)
        except Exception as exc:  # the SDK wraps transport failures in groups and its own errors
            raise AgentCallError(f"{tool}: the MCP call to {self.mcp_url} failed: {_plain(exc)}") from exc
        if result.is_error and not errors:
            text = " ".join(getattr(part, "text", "") for part in result.content).strip()
            raise AgentCallError(f"{tool} refused: {text or 'no reason given'}")
        return result


def _plain(exc: BaseException) -> str:
    """The innermost error of an exception group, in one line."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"
