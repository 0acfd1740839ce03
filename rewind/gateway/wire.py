"""HTTP/1.1 for the links to upstream MCP servers: kept-alive connections on asyncio streams.

Why it exists: every forwarded call goes through the SDK's client, which speaks HTTP through an
httpx client. Below that client, httpx's connection layer (httpcore with the h11 state machine)
was the largest single part of what the gateway's event loop spent per forwarded call
(``bench/relay.py`` measures it side by side). ``KeptAliveTransport`` is the transport that httpx
client uses instead: the client above it (headers, timeouts, event hooks, the SDK's JSON and SSE
reading) is unchanged, only the bytes on the wire are written and read here.

What it speaks, and what it refuses:
- HTTP/1.1 only (httpx's default too), over TCP or TLS; TLS with httpx's own default context, so
  certificates are verified exactly as before;
- connections kept alive and reused, at most ``MAX_IDLE`` idle ones per origin, each for at most
  ``KEEPALIVE_S`` (httpx's defaults); one the server has closed, or that is still being read, is
  never reused;
- request bodies sent as httpx framed them (Content-Length, or chunked);
- response bodies framed by Content-Length, chunked encoding or the connection's end, each piece
  handed up as it arrives (an SSE stream is read as it is written); 1xx answers are skipped;
- what cannot be parsed, a head over ``MAX_HEAD`` bytes, or a connection that ends inside a
  message is httpx's ``RemoteProtocolError``; the other failures are httpx's own classes too
  (``ConnectError``, ``ConnectTimeout``, ``ReadTimeout``, ``WriteTimeout``, ``ReadError``,
  ``WriteError``), so a caller cannot tell which transport ran.

A proxy named in the environment is not spoken here: ``upstream_transport`` then returns None and
the link keeps httpx's own transport, which honours it.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
import urllib.request
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field

import httpx2

MAX_IDLE = 20  # idle connections kept per origin (httpx's max_keepalive_connections)
KEEPALIVE_S = 5.0  # an idle connection older than this is closed, not reused (httpx's keepalive_expiry)
MAX_HEAD = 64 * 1024  # the status line and headers of one answer
READ_SIZE = 64 * 1024
DEFAULT_PORTS = {b"http": 80, b"https": 443}

Origin = tuple[bytes, str, int]


def upstream_transport() -> KeptAliveTransport | None:
    """The transport for a link to an HTTP upstream; None (httpx's own) when the environment names a proxy."""
    proxies = urllib.request.getproxies()
    if any(key in proxies for key in ("http", "https", "all")):
        return None
    return KeptAliveTransport()


@dataclass
class _Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    idle_since: float = field(default_factory=time.monotonic)

    def reusable(self) -> bool:
        """Still open, nothing unread, not idle too long: the server has not closed it."""
        return (
            not self.writer.is_closing()
            and not self.reader.at_eof()
            and self.reader.exception() is None
            and time.monotonic() - self.idle_since < KEEPALIVE_S
        )

    def close(self) -> None:
        self.writer.close()


@dataclass
class _Head:
    status: int
    reason: bytes
    headers: list[tuple[bytes, bytes]]
    keep_alive: bool
    length: int | None  # None: chunked, or until the connection ends
    chunked: bool


class KeptAliveTransport(httpx2.AsyncBaseTransport):
    """httpx's transport interface over kept-alive HTTP/1.1 connections (see the module)."""

    def __init__(self, ssl_context: ssl.SSLContext | None = None) -> None:
        self._ssl_context = ssl_context
        self._idle: dict[Origin, list[_Connection]] = {}
        self._closed = False

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        url = request.url
        scheme = url.raw_scheme
        if scheme not in DEFAULT_PORTS:
            raise httpx2.UnsupportedProtocol(f"Request URL has an unsupported protocol '{scheme.decode()}://'.")
        origin = (scheme, url.raw_host.decode("ascii"), url.port or DEFAULT_PORTS[scheme])
        timeouts = request.extensions.get("timeout", {})
        connection = self._take_idle(origin) or await self._connect(origin, timeouts.get("connect"))
        try:
            await _send(connection, request, timeouts.get("write"))
            head = await _read_head(connection, request.method, timeouts.get("read"))
        except BaseException:
            connection.close()
            raise
        body = _Body(self, origin, connection, head, timeouts.get("read"))
        return httpx2.Response(
            head.status,
            headers=head.headers,
            stream=body,
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": head.reason},
        )

    async def aclose(self) -> None:
        self._closed = True
        for connections in self._idle.values():
            for connection in connections:
                connection.close()
        self._idle.clear()

    # -- the pool ---------------------------------------------------------------------------------
    def _take_idle(self, origin: Origin) -> _Connection | None:
        idle = self._idle.get(origin)
        while idle:
            connection = idle.pop()
            if connection.reusable():
                return connection
            connection.close()
        return None

    def _give_back(self, origin: Origin, connection: _Connection) -> None:
        idle = self._idle.setdefault(origin, [])
        if self._closed or len(idle) >= MAX_IDLE:
            connection.close()
            return
        connection.idle_since = time.monotonic()
        idle.append(connection)

    async def _connect(self, origin: Origin, timeout: float | None) -> _Connection:
        scheme, host, port = origin
        tls: ssl.SSLContext | None = None
        if scheme == b"https":
            tls = self._ssl_context = self._ssl_context or httpx2.create_ssl_context()
        try:
            async with asyncio.timeout(timeout):
                reader, writer = await asyncio.open_connection(
                    host, port, ssl=tls, server_hostname=host if tls else None, limit=MAX_HEAD
                )
        except TimeoutError:
            raise httpx2.ConnectTimeout(f"connecting to {host}:{port} took over {timeout:g} s") from None
        except (OSError, ssl.SSLError) as exc:
            raise httpx2.ConnectError(str(exc) or type(exc).__name__) from exc
        return _Connection(reader, writer)


async def _send(connection: _Connection, request: httpx2.Request, timeout: float | None) -> None:
    head = [f"{request.method} ".encode(), request.url.raw_path, b" HTTP/1.1\r\n"]
    for name, value in request.headers.raw:
        head += (name, b": ", value, b"\r\n")
    head.append(b"\r\n")
    writer = connection.writer
    chunked = request.headers.get("transfer-encoding", "").lower() == "chunked"
    # The head goes out with the body's first piece, in one write: each write is a send on the
    # socket, and on loopback each send costs the kernel's wake-up of the upstream (bench/gateway.py:
    # the two sends of a forwarded call were 13 % of the gateway's samples holding the GIL).
    unsent = [b"".join(head)]
    try:
        async with asyncio.timeout(timeout):
            async for piece in request.stream:  # type: ignore[union-attr]
                if not piece:
                    continue
                unsent.append(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
                writer.write(b"".join(unsent))
                unsent = []
                await writer.drain()
            if chunked:
                unsent.append(b"0\r\n\r\n")
            if unsent:
                writer.write(b"".join(unsent))
            await writer.drain()
    except TimeoutError:
        raise httpx2.WriteTimeout(f"sending the request took over {timeout:g} s") from None
    except OSError as exc:
        raise httpx2.WriteError(str(exc) or type(exc).__name__) from exc


async def _read(awaitable: Awaitable[bytes], timeout: float | None) -> bytes:
    try:
        async with asyncio.timeout(timeout):
            return await awaitable
    except TimeoutError:
        raise httpx2.ReadTimeout(f"no answer within {timeout:g} s") from None
    except asyncio.IncompleteReadError:
        raise httpx2.RemoteProtocolError("the server closed the connection inside a message") from None
    except asyncio.LimitOverrunError:
        raise httpx2.RemoteProtocolError(f"a line of the answer is over {MAX_HEAD} bytes") from None
    except ValueError as exc:  # the stream's own "separator not found, chunk exceeds the limit"
        raise httpx2.RemoteProtocolError(str(exc)) from None
    except OSError as exc:
        raise httpx2.ReadError(str(exc) or type(exc).__name__) from exc


async def _read_head(connection: _Connection, method: str, timeout: float | None) -> _Head:
    while True:
        try:
            raw = await _read(connection.reader.readuntil(b"\r\n\r\n"), timeout)
        except httpx2.RemoteProtocolError:
            if connection.reader.at_eof():
                raise httpx2.RemoteProtocolError("Server disconnected without sending a response.") from None
            raise
        head = _parse_head(raw, method)
        if head.status >= 200 or head.status == 101:
            return head  # 1xx but 101 are interim answers: the real one follows


def _parse_head(raw: bytes, method: str) -> _Head:
    lines = raw[:-4].split(b"\r\n")
    version, _, rest = lines[0].partition(b" ")
    code, _, reason = rest.partition(b" ")
    if version not in (b"HTTP/1.1", b"HTTP/1.0") or len(code) != 3 or not code.isdigit():
        raise httpx2.RemoteProtocolError(f"not an HTTP/1.1 status line: {lines[0][:80]!r}")
    headers: list[tuple[bytes, bytes]] = []
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not name or name != name.strip() or line[:1] in (b" ", b"\t"):
            raise httpx2.RemoteProtocolError(f"not an HTTP header line: {line[:80]!r}")
        headers.append((name, value.strip()))
    status = int(code)
    return _framing(status, reason, headers, method, http_10=version == b"HTTP/1.0")


def _framing(status: int, reason: bytes, headers: list[tuple[bytes, bytes]], method: str, *, http_10: bool) -> _Head:
    connection_tokens: set[bytes] = set()
    encodings: list[bytes] = []
    lengths: set[bytes] = set()
    for name, value in headers:
        lowered = name.lower()
        if lowered == b"connection":
            connection_tokens.update(t.strip().lower() for t in value.split(b","))
        elif lowered == b"transfer-encoding":
            encodings += [t.strip().lower() for t in value.split(b",")]
        elif lowered == b"content-length":
            lengths.update(t.strip() for t in value.split(b","))
    keep_alive = b"keep-alive" in connection_tokens if http_10 else b"close" not in connection_tokens
    if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
        return _Head(status, reason, headers, keep_alive, 0, False)
    if encodings:
        if encodings[-1] != b"chunked":  # the body ends with the connection (RFC 9112, 6.3)
            return _Head(status, reason, headers, False, None, False)
        return _Head(status, reason, headers, keep_alive, None, True)
    if not lengths:
        return _Head(status, reason, headers, False, None, False)
    if len(lengths) != 1 or not next(iter(lengths)).isdigit():
        raise httpx2.RemoteProtocolError(f"an invalid Content-Length: {sorted(lengths)!r}")
    return _Head(status, reason, headers, keep_alive, int(next(iter(lengths))), False)


class _Body(httpx2.AsyncByteStream):
    """One answer's body, read as it arrives; its connection goes back to the pool once read to the end."""

    def __init__(
        self,
        transport: KeptAliveTransport,
        origin: Origin,
        connection: _Connection,
        head: _Head,
        timeout: float | None,
    ) -> None:
        self._transport, self._origin, self._connection = transport, origin, connection
        self._head, self._timeout = head, timeout
        self._complete = False
        self._released = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for piece in self._pieces():
                yield piece
        except BaseException:
            self._release()
            raise
        self._complete = True
        self._release()

    async def _pieces(self) -> AsyncIterator[bytes]:
        reader, timeout, head = self._connection.reader, self._timeout, self._head
        if head.chunked:
            while True:
                size_line = await _read(reader.readuntil(b"\r\n"), timeout)
                size_text = size_line.split(b";", 1)[0].strip()
                try:
                    size = int(size_text, 16)
                except ValueError:
                    raise httpx2.RemoteProtocolError(f"an invalid chunk size: {size_text[:20]!r}") from None
                if size == 0:
                    while await _read(reader.readuntil(b"\r\n"), timeout) != b"\r\n":
                        pass  # trailers: not used
                    return
                piece = await _read(reader.readexactly(size + 2), timeout)
                if piece[-2:] != b"\r\n":
                    raise httpx2.RemoteProtocolError("a chunk does not end where its size says")
                yield piece[:-2]
        elif head.length is not None:
            left = head.length
            while left:
                piece = await _read(reader.read(min(left, READ_SIZE)), timeout)
                if not piece:
                    raise httpx2.RemoteProtocolError("the server closed the connection inside the body")
                left -= len(piece)
                yield piece
        else:
            while piece := await _read(reader.read(READ_SIZE), timeout):
                yield piece

    def _release(self) -> None:
        if self._released:
            return
        self._released = True
        if self._complete and self._head.keep_alive:
            self._transport._give_back(self._origin, self._connection)
        else:
            self._connection.close()

    async def aclose(self) -> None:
        with contextlib.suppress(Exception):
            self._release()
