"""Read and write one file inside a guest through the tools an operator named (``GuestFileTools``).

The calls go through the gateway's own links (the same sessions, healing and error words as a forwarded call),
each step in a short event loop of its own, so a task or a web request can make it.
``GuestFileError.may_have_run`` tells a write that never reached the guest (nothing written) from one that broke
on the way (maybe partly written).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from collections.abc import Awaitable, Callable
from typing import Any

from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, TextContent

from recoveries.restore.models import GuestFileTools
from rewind.gateway.links import Link, UpstreamCallBroke, UpstreamUnavailable
from rewind.gateway.listing import run_async
from rewind.gateway.services import upstream_spec
from rewind.gateway.sessions import link_for
from rewind.lib.errors import ApplicationError

# Beyond the upstream's call timeout: the bound of one whole call (as forward.py has).
CALL_GRACE_S = 5.0


class GuestFileError(ApplicationError):
    def __init__(self, message: str, *, may_have_run: bool) -> None:
        super().__init__(message)
        self.may_have_run = may_have_run


async def _no_progress(progress: float, total: float | None, message: str | None) -> None:
    return None


class GuestFiles:
    """One session's worth of calls to the tools of ``tools`` (inside ``guest_files_use``)."""

    def __init__(self, link: Link, tools: GuestFileTools) -> None:
        self.link = link
        self.tools = tools

    @property
    def name(self) -> str:
        return self.tools.upstream.name

    def _arguments(self, vm: str, path: str, *, reader: bool = False) -> dict[str, Any]:
        vm_arg, path_arg = (
            (self.tools.reader_vm, self.tools.reader_path) if reader else (self.tools.vm_arg, self.tools.path_arg)
        )
        arguments: dict[str, Any] = {path_arg: path}
        if vm_arg:  # none for an upstream that serves one machine
            arguments[vm_arg] = vm
        if self.tools.encoding_arg:
            arguments[self.tools.encoding_arg] = self.tools.content_encoding
        return arguments

    async def ready(self) -> None:
        """Raises ``GuestFileError`` (nothing ran) when the upstream does not answer."""
        try:
            await self.link.ready()
        except UpstreamUnavailable as exc:
            raise GuestFileError(exc.message, may_have_run=False) from None

    async def _call(self, tool: str, arguments: dict[str, Any]) -> str:
        spec = self.link.spec
        try:
            async with asyncio.timeout(spec.call_timeout_s + CALL_GRACE_S):
                result = await self.link.call_tool(tool, arguments, _no_progress)
        except UpstreamUnavailable as exc:
            raise GuestFileError(exc.message, may_have_run=False) from None
        except UpstreamCallBroke as exc:
            raise GuestFileError(exc.message, may_have_run=True) from None
        except TimeoutError:
            self.link.discard()
            raise GuestFileError(
                f"upstream {self.name} did not finish {tool} within {spec.call_timeout_s:g} s", may_have_run=True
            ) from None
        except MCPError as exc:
            raise GuestFileError(
                f"upstream {self.name} answered {tool} with an error: {str(exc)[:300]}", may_have_run=True
            ) from None
        text = _text_of(result)
        if result.is_error:
            raise GuestFileError(f"{self.name}/{tool} answered with an error: {text[:300]}", may_have_run=True)
        return text

    async def read(self, vm: str, path: str) -> bytes:
        reader = self.tools.reader_tool
        if not reader:
            raise GuestFileError(f"no reader tool is configured for upstream {self.name}", may_have_run=False)
        text = await self._call(reader, self._arguments(vm, path, reader=True))
        if self.tools.content_encoding == GuestFileTools.Encoding.BASE64:
            try:
                return base64.b64decode("".join(text.split()), validate=True)
            except (binascii.Error, ValueError):
                raise GuestFileError(
                    f"{self.name}/{reader} did not answer with base64 as configured", may_have_run=False
                ) from None
        return text.encode("utf-8")

    async def write(self, vm: str, path: str, data: bytes) -> None:
        arguments = self._arguments(vm, path)
        arguments[self.tools.content_arg] = encode_content(self.tools, data)
        await self._call(self.tools.writer_tool, arguments)


def encode_content(tools: GuestFileTools, data: bytes) -> str:
    """The bytes as the writer takes them; raises ``ApplicationError`` for binary bytes and a text writer."""
    if tools.content_encoding == GuestFileTools.Encoding.BASE64:
        return base64.b64encode(data).decode("ascii")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ApplicationError(
            f"the file is not UTF-8 text and the writer of upstream {tools.upstream.name} takes text: "
            "configure base64 for it to restore binary files"
        ) from None


def _text_of(result: CallToolResult) -> str:
    return "".join(part.text for part in result.content if isinstance(part, TextContent))


def guest_files_use[T](tools: GuestFileTools, steps: Callable[[GuestFiles], Awaitable[T]]) -> T:
    """Run ``steps`` with one session to the tools' upstream, from sync code; closed afterwards."""
    spec = upstream_spec(tools.upstream)

    async def go() -> T:
        link = link_for(spec)
        try:
            return await steps(GuestFiles(link, tools))
        finally:
            link.discard()

    return run_async(go)
