"""Sessions to upstream MCP servers, through the official SDK's clients.

A ``Link`` is one upstream's session in this process: opened on first use, shared by every
concurrent call (JSON-RPC multiplexes them), and reopened by the next call once it broke. For
stdio that is supervision: the command is started on first use and started again after it died.
The session lives in a task of its own, because the SDK's client must be entered and left by the
same task, and calls come from many request tasks.

One-off sessions (``open_client``) serve the admin's "test connection" and the tool-list refresh,
which run in sync code under ``asyncio.run``.

What an upstream gets: its own credentials (headers, or the command's environment), never the
agent's token, and a client with no sampling, roots or elicitation callback, so it cannot call
back into this service. A stdio server inherits only the SDK's safe variables (PATH, HOME, ...),
not this process's environment with its keys.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx2
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from rewind.errors import ApplicationError

logger = logging.getLogger(__name__)

CLIENT_NAME = "zerto-rewind-gateway"


class UpstreamUnavailable(ApplicationError):
    """The upstream could not be reached, did not answer in time, or did not speak MCP."""


@dataclass(frozen=True)
class UpstreamSpec:
    """What it takes to reach one upstream, decrypted; built by ``services.upstream_spec``."""

    pk: int
    name: str
    transport: str
    url: str
    headers: tuple[tuple[str, str], ...]
    command: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    connect_timeout_s: float
    call_timeout_s: float
    version: str  # changes whenever the upstream's settings change: a new session is opened

    def __repr__(self) -> str:  # never print the credentials
        return f"UpstreamSpec({self.name!r}, {self.transport})"


def _target(spec: UpstreamSpec, stack: contextlib.AsyncExitStack) -> Any:
    if spec.transport == "stdio":
        return StdioServerParameters(command=spec.command[0], args=list(spec.command[1:]), env=dict(spec.env))
    timeout = httpx2.Timeout(spec.connect_timeout_s, read=spec.call_timeout_s + spec.connect_timeout_s)
    http = httpx2.AsyncClient(headers=dict(spec.headers), timeout=timeout)
    stack.push_async_callback(http.aclose)
    return streamable_http_client(spec.url, http_client=http)


def _leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def unavailable(spec: UpstreamSpec, exc: BaseException, *, doing: str) -> UpstreamUnavailable:
    """One sentence naming the upstream and what went wrong; never its headers or environment."""
    leaf = _leaf(exc)
    if isinstance(leaf, TimeoutError):
        return UpstreamUnavailable(f"upstream {spec.name} did not answer within {spec.connect_timeout_s:g} s ({doing})")
    if isinstance(leaf, MCPError):
        return UpstreamUnavailable(f"upstream {spec.name} answered {doing} with an error: {str(leaf)[:200]}")
    text = str(leaf).splitlines()[0][:200] if str(leaf) else ""
    return UpstreamUnavailable(
        f"upstream {spec.name} is unavailable ({doing}): {type(leaf).__name__}: {text}".rstrip(": ")
    )


@contextlib.asynccontextmanager
async def open_client(spec: UpstreamSpec) -> AsyncIterator[Client]:
    """A session of its own, closed on leaving; raises ``UpstreamUnavailable`` if it cannot open."""
    async with contextlib.AsyncExitStack() as stack:
        try:
            async with asyncio.timeout(spec.connect_timeout_s):
                client = await stack.enter_async_context(
                    Client(_target(spec, stack), mode="auto", read_timeout_seconds=spec.call_timeout_s)
                )
        except (Exception, BaseExceptionGroup) as exc:
            raise unavailable(spec, exc, doing="connecting") from None
        yield client


class Link:
    """One upstream's shared session on one event loop."""

    def __init__(self, spec: UpstreamSpec) -> None:
        self.spec = spec
        self._client: Client | None = None
        self._stop: asyncio.Event | None = None
        self._lock = asyncio.Lock()

    async def client(self) -> Client:
        if self._client is not None:
            return self._client
        async with self._lock:
            if self._client is None:
                await self._open()
            assert self._client is not None
            return self._client

    async def _open(self) -> None:
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[Client] = loop.create_future()
        stop = self._stop = asyncio.Event()
        holder = loop.create_task(self._hold(ready, stop), name=f"gateway-link-{self.spec.name}")
        try:
            async with asyncio.timeout(self.spec.connect_timeout_s):
                self._client = await asyncio.shield(ready)
        except BaseException as exc:
            stop.set()
            holder.cancel()
            if isinstance(exc, asyncio.CancelledError):
                raise
            raise unavailable(self.spec, exc, doing="connecting") from None

    async def _hold(self, ready: asyncio.Future[Client], stop: asyncio.Event) -> None:
        try:
            async with contextlib.AsyncExitStack() as stack:
                target = _target(self.spec, stack)
                client = Client(target, mode="auto", read_timeout_seconds=self.spec.call_timeout_s)
                await stack.enter_async_context(client)
                if not ready.done():
                    ready.set_result(client)
                await stop.wait()
        except (Exception, BaseExceptionGroup) as exc:
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError(str(exc)))
            else:
                logger.info("upstream %s: session ended: %r", self.spec.name, _leaf(exc))
        finally:
            if self._stop is stop:
                self._client = None

    def discard(self) -> None:
        """Close the session; the next call opens a new one (after the upstream broke or changed)."""
        if self._stop is not None:
            self._stop.set()
        self._client = None


# Per event loop (tests run many; a server runs one), per upstream.
_links: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[int, Link]] = weakref.WeakKeyDictionary()


def link_for(spec: UpstreamSpec) -> Link:
    """This loop's link to the upstream; a link opened with older settings is closed and replaced."""
    links = _links.setdefault(asyncio.get_running_loop(), {})
    link = links.get(spec.pk)
    if link is None or link.spec.version != spec.version:
        if link is not None:
            link.discard()
        link = links[spec.pk] = Link(spec)
    return link
