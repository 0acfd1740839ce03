"""Sessions to upstream MCP servers, through the official SDK's client only, that heal.

A ``Link`` is one upstream's session in this process: opened on first use, shared by every
concurrent call (JSON-RPC multiplexes them), and reopened by the next call once it broke. For
stdio that is supervision: the command is started on first use and started again after it died.
The session lives in a task of its own, because the SDK's client must be entered and left by the
same task, and calls come from many request tasks.

What counts as broken, and what a call is then told:
- the session's connection ended (a stdio child that exited, a stream that ended): the next call
  opens a new session (starting the command again) before it sends anything;
- an HTTP upstream refusing our session id (404, or a 400 that never read the request: see
  ``session_refused``): it forgot the session (it restarted). The call did not run there; a new
  session is opened and the call sent once more;
- the connection broke after the call was sent: the call may or may not have run
  (``UpstreamCallBroke``); the next call opens a new session;
- a session that cannot be opened: ``UpstreamUnavailable`` (nothing was sent), and for a while
  (1 s, doubling to 30 s while it keeps failing) every call in this process is refused at once with
  the same reason, instead of each waiting for the connect timeout; then one call tries again.

``ready()`` asks the upstream for a ping over the session (reopened once if it broke): a guarded
call asks it before a checkpoint is spent on a call that could not be forwarded.

One-off sessions (``open_client``) serve the admin's "test connection" and the tool-list refresh,
which run in sync code under ``asyncio.run``.

What an upstream gets: its own credentials (headers, or the command's environment), never the
agent's token. What it asks of the agent's side (sampling, elicitation, roots, also inside
``input_required`` rounds) goes to the callbacks the link is given (``rewind.gateway.sessions``). A stdio server inherits only the SDK's safe variables
(PATH, HOME, ...), not this process's environment with its keys.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import anyio
import httpx2
from anyio.abc import ObjectReceiveStream, ObjectSendStream
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, Implementation
from mcp_types.jsonrpc import CONNECTION_CLOSED, REQUEST_TIMEOUT
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from rewind import __version__
from rewind.lib.errors import ApplicationError

logger = logging.getLogger(__name__)

CLIENT_NAME = "zerto-rewind-gateway"
FIRST_BACKOFF_S, MAX_BACKOFF_S = 1.0, 30.0
SESSION_HEADER = "mcp-session-id"


class UpstreamUnavailable(ApplicationError):
    """The upstream could not be reached, did not answer in time, or did not speak MCP: nothing ran there."""


class UpstreamCallBroke(ApplicationError):
    """The connection broke, or the answer did not come, after the call was sent: it may have run there."""


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


ResponseHook = Callable[[httpx2.Response], Awaitable[None]]
Streams = tuple[ObjectReceiveStream[Any], ObjectSendStream[Any]]


class EndWatch(ObjectReceiveStream[Any]):
    """A session's read stream that notes when it ends: the connection is gone (a stdio child exited,
    a stream closed), so a session found ended before a call is reopened before anything is sent.

    The SDK's client reads its transport's streams through anyio's public stream interface; this
    is that interface around the transport's own stream.
    """

    def __init__(self, inner: ObjectReceiveStream[Any]) -> None:
        self._inner = inner
        self.ended = False

    async def receive(self) -> Any:
        try:
            return await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self.ended = True
            raise

    async def aclose(self) -> None:
        self.ended = True
        await self._inner.aclose()

    @property
    def last_context(self) -> Any:
        # The SDK's HTTP transport hands each message's contextvars along this attribute, which its
        # dispatcher reads when present; passing it on keeps that behaviour unchanged.
        return getattr(self._inner, "last_context", None)


@contextlib.asynccontextmanager
async def _watched(
    transport: contextlib.AbstractAsyncContextManager[Any], watch: list[EndWatch]
) -> AsyncIterator[Streams]:
    async with transport as (read, write):
        watched = EndWatch(read)
        watch.append(watched)
        yield watched, write


def stdio_parameters(spec: UpstreamSpec) -> StdioServerParameters:
    """The command, and its environment: the SDK's safe defaults (PATH, HOME...) and the upstream's own."""
    return StdioServerParameters(command=spec.command[0], args=list(spec.command[1:]), env=dict(spec.env))


def _transport(
    spec: UpstreamSpec, stack: contextlib.AsyncExitStack, on_response: ResponseHook | None = None
) -> contextlib.AbstractAsyncContextManager[Any]:
    """The SDK's transport for the upstream (stdio or streamable HTTP), entered by the SDK's client."""
    if spec.transport == "stdio":
        params = stdio_parameters(spec)
        # The child's stderr is this process's own as it started: in a Celery worker sys.stderr is a
        # logging proxy with no file descriptor, which a child cannot inherit.
        return stdio_client(params, errlog=sys.__stderr__ or sys.stderr)
    timeout = httpx2.Timeout(spec.connect_timeout_s, read=spec.call_timeout_s + spec.connect_timeout_s)
    hooks = {"response": [on_response]} if on_response is not None else None
    http = httpx2.AsyncClient(headers=dict(spec.headers), timeout=timeout, event_hooks=hooks)
    stack.push_async_callback(http.aclose)
    return streamable_http_client(spec.url, http_client=http)


async def session_refused(response: httpx2.Response) -> bool:
    """Whether the upstream refused a request for its session, before taking the request itself.

    The specification says 404; servers built on the TypeScript SDK's examples (server-everything
    among them) answer 400 with a JSON-RPC error whose id is null: the request was never read as a
    request, so it did not run there, and a new session may send it again.
    """
    if response.status_code == 404:
        return True
    if response.status_code != 400 or not response.headers.get("content-type", "").startswith("application/json"):
        return False
    try:
        body = json.loads(await response.aread())
    except (ValueError, httpx2.HTTPError):
        return False
    return isinstance(body, dict) and "error" in body and body.get("id") is None


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


def _client(spec: UpstreamSpec, streams: contextlib.AbstractAsyncContextManager[Any], asks: Any) -> Client:
    return Client(
        streams,
        mode="auto",
        read_timeout_seconds=spec.call_timeout_s,
        client_info=Implementation(name=CLIENT_NAME, version=__version__),
        sampling_callback=asks.sampling if asks is not None else None,
        elicitation_callback=asks.elicitation if asks is not None else None,
        list_roots_callback=asks.list_roots if asks is not None else None,
    )


@contextlib.asynccontextmanager
async def open_client(spec: UpstreamSpec, asks: Any = None) -> AsyncIterator[Client]:
    """A session of its own, closed on leaving; raises ``UpstreamUnavailable`` if it cannot open."""
    async with contextlib.AsyncExitStack() as stack:
        try:
            async with asyncio.timeout(spec.connect_timeout_s):
                client = await stack.enter_async_context(_client(spec, _transport(spec, stack), asks))
        except (Exception, BaseExceptionGroup) as exc:
            raise unavailable(spec, exc, doing="connecting") from None
        yield client


class Link:
    """One upstream's shared session on one event loop, reopened when it broke (see the module)."""

    def __init__(self, spec: UpstreamSpec, asks: Any = None) -> None:
        self.spec = spec
        self._asks = asks  # answers what the upstream asks of the agent's side (``rewind.gateway.sessions``)
        self._client: Client | None = None
        self._watch: list[EndWatch] = []  # the open session's read stream
        self._stop: asyncio.Event | None = None
        self._lock = asyncio.Lock()
        self._session_lost = False  # the upstream answered 404 to our session id since the last send
        self._failures = 0
        self._retry_at = 0.0  # monotonic; before it, calls are refused at once
        self.down_since: datetime | None = None  # None while the upstream answers this process
        self.last_error = ""
        self.changes = 0  # how often it answered first, went down or came back: callers record each change once
        self.recorded_changes = 0
        self.answered_once = False

    # -- the session ------------------------------------------------------------------------------
    def _ended(self) -> bool:
        return any(w.ended for w in self._watch)

    async def client(self) -> Client:
        """The open session, a new one if it broke. Raises ``UpstreamUnavailable``: nothing was sent."""
        client = self._client
        if client is not None and not self._ended():
            return client
        async with self._lock:
            if self._client is not None and self._ended():
                self.discard()  # the child died or the stream ended: start again
            if self._client is None:
                self._refuse_while_backing_off()
                try:
                    await self._open()
                except UpstreamUnavailable as exc:
                    self._failed(exc.message)
                    raise
                self._answered()
            assert self._client is not None
            return self._client

    async def _open(self) -> None:
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[Client] = loop.create_future()
        stop = self._stop = asyncio.Event()
        watch: list[EndWatch] = []
        holder = loop.create_task(self._hold(ready, stop, watch), name=f"gateway-link-{self.spec.name}")
        try:
            async with asyncio.timeout(self.spec.connect_timeout_s):
                self._client = await asyncio.shield(ready)
        except BaseException as exc:
            stop.set()
            holder.cancel()
            if isinstance(exc, asyncio.CancelledError):
                raise
            raise unavailable(self.spec, exc, doing="connecting") from None
        self._watch = watch

    async def _hold(self, ready: asyncio.Future[Client], stop: asyncio.Event, watch: list[EndWatch]) -> None:
        try:
            async with contextlib.AsyncExitStack() as stack:
                streams = _watched(_transport(self.spec, stack, self._note_response), watch)
                client = await stack.enter_async_context(_client(self.spec, streams, self._asks))
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

    async def _note_response(self, response: httpx2.Response) -> None:
        if response.request.headers.get(SESSION_HEADER) and await session_refused(response):
            self._session_lost = True

    def discard(self) -> None:
        """Close the session; the next call opens a new one (after the upstream broke or changed)."""
        if self._stop is not None:
            self._stop.set()
        self._client = None
        self._watch = []

    # -- calls ------------------------------------------------------------------------------------
    async def call_tool(
        self, name: str, arguments: dict[str, Any], progress: ProgressFnT | None = None
    ) -> CallToolResult:
        """Call the upstream's tool. Raises ``UpstreamUnavailable`` (it did not run), ``UpstreamCallBroke``
        (it may have run), or ``MCPError`` when the upstream answered with a JSON-RPC error."""
        for first_try in (True, False):
            client = await self.client()
            self._session_lost = False
            try:
                return await self._call(client, name, arguments, progress)
            except MCPError:
                if not self._session_lost:
                    raise
                # Refused before it ran: the upstream no longer knows our session (it restarted).
                self.discard()
                if not first_try:
                    raise self._down(
                        UpstreamUnavailable(f"upstream {self.spec.name} refused our new session too")
                    ) from None
        raise AssertionError("unreachable")

    async def _call(
        self, client: Client, name: str, arguments: dict[str, Any], progress: ProgressFnT | None
    ) -> CallToolResult:
        try:
            result = await client.call_tool(
                name, arguments, read_timeout_seconds=self.spec.call_timeout_s, progress_callback=progress
            )
        except MCPError as exc:
            if self._session_lost:
                raise
            if exc.error.code == REQUEST_TIMEOUT:
                raise UpstreamCallBroke(
                    f"upstream {self.spec.name} did not finish {name} within {self.spec.call_timeout_s:g} s"
                ) from None
            if exc.error.code == CONNECTION_CLOSED:
                self.discard()
                raise self._down(
                    UpstreamCallBroke(f"upstream {self.spec.name} closed the connection during the call of {name}")
                ) from None
            raise  # a JSON-RPC error answer: the session itself is fine
        except (Exception, BaseExceptionGroup) as exc:
            self.discard()
            broke = unavailable(self.spec, exc, doing=f"calling {name}")
            if isinstance(_leaf(exc), httpx2.ConnectError):
                raise self._down(broke) from None  # never reached it
            raise self._down(UpstreamCallBroke(broke.message)) from None
        self._answered()
        return result

    async def ready(self) -> None:
        """Return once the upstream answers over the session (a broken one reopened once).

        Asks ``ping`` of a handshake-era session and ``server/discover`` of a later one (which has
        no ping); any JSON-RPC answer counts, even an error: it answered. Raises
        ``UpstreamUnavailable``. A guarded call asks this before its checkpoint is taken.
        """
        for first_try in (True, False):
            client = await self.client()
            self._session_lost = False
            try:
                async with asyncio.timeout(self.spec.connect_timeout_s):
                    if client.protocol_version in MODERN_PROTOCOL_VERSIONS:
                        await client.session.send_discover(client.protocol_version)
                    else:
                        await client.session.send_ping()
            except MCPError as exc:
                if not self._session_lost and exc.error.code not in (CONNECTION_CLOSED, REQUEST_TIMEOUT):
                    break
                failure: BaseException = exc
            except (Exception, BaseExceptionGroup) as exc:
                failure = exc
            else:
                break
            lost = self._session_lost or self._ended()
            self.discard()
            if first_try and lost:
                continue
            raise self._down(unavailable(self.spec, failure, doing="answering a ping")) from None
        self._answered()

    # -- health in this process -------------------------------------------------------------------
    def _refuse_while_backing_off(self) -> None:
        wait = self._retry_at - time.monotonic()
        if wait > 0 and self.down_since is not None:
            raise UpstreamUnavailable(
                f"upstream {self.spec.name} has not answered this process since "
                f"{self.down_since:%H:%M:%S} UTC ({self.last_error}); it is tried again in {wait:.0f} s"
            )

    def _down[E: ApplicationError](self, error: E) -> E:
        self._failed(error.message)
        return error

    def _failed(self, error: str) -> None:
        backoff = min(MAX_BACKOFF_S, FIRST_BACKOFF_S * 2**self._failures)
        self._failures += 1
        self._retry_at = time.monotonic() + backoff
        self.last_error = error[:300]
        if self.down_since is None:
            self.down_since = datetime.now(UTC)
            self.changes += 1
            logger.warning(
                "upstream %s: down in this process (%s); tried again in %.0f s", self.spec.name, error, backoff
            )

    def _answered(self) -> None:
        self._failures, self._retry_at = 0, 0.0
        if not self.answered_once:  # recorded once, so "Test connection" names every process that uses it
            self.answered_once = True
            self.changes += 1
        if self.down_since is not None:
            logger.warning("upstream %s: answers again in this process", self.spec.name)
            self.down_since, self.last_error = None, ""
            self.changes += 1
