"""Scripted HTTP servers for the links' tests: real sockets answering each request with bytes given in advance.

Each ``Scripted`` server is a TCP (or TLS) server on 127.0.0.1 scripted byte by byte, so every
framing a client must read, and every way a server can break one, is sent exactly
(``tests/gateway/test_wire.py``, ``tests/gateway/test_relay.py``).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any

Reply = bytes | Callable[[asyncio.StreamWriter], Awaitable[bool]]  # a callable says whether to hang up


def ok(body: bytes, *extra: bytes) -> bytes:
    head = [b"HTTP/1.1 200 OK", b"Content-Type: application/json", b"Content-Length: %d" % len(body), *extra]
    return b"\r\n".join(head) + b"\r\n\r\n" + body


def chunked(*pieces: bytes) -> bytes:
    body = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
    return b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + body


class Scripted:
    """A TCP (or TLS) server on 127.0.0.1 answering each request it reads with the next reply."""

    def __init__(self, *replies: Reply, tls: ssl.SSLContext | None = None) -> None:
        self.replies = list(replies)
        self.tls = tls
        self.connections = 0
        self.requests: list[tuple[bytes, bytes]] = []  # (head, body)

    async def __aenter__(self) -> Scripted:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.tls)
        port = self.server.sockets[0].getsockname()[1]
        self.url = f"{'https' if self.tls else 'http'}://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while self.replies:
                head = await reader.readuntil(b"\r\n\r\n")
                self.requests.append((head, await _request_body(reader, head)))
                reply = self.replies.pop(0)
                if isinstance(reply, bytes):
                    writer.write(reply)
                    await writer.drain()
                elif await reply(writer):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


async def _request_body(reader: asyncio.StreamReader, head: bytes) -> bytes:
    lowered = head.lower()
    if b"transfer-encoding: chunked" in lowered:
        body = b""
        while size := int((await reader.readuntil(b"\r\n")).strip(), 16):
            body += (await reader.readexactly(size + 2))[:-2]
        await reader.readuntil(b"\r\n")
        return body
    for line in lowered.split(b"\r\n"):
        if line.startswith(b"content-length:"):
            return await reader.readexactly(int(line.split(b":")[1]))
    return b""


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    """On a thread of its own: a browser test run before in the same worker leaves its event loop
    running on this one."""
    with ThreadPoolExecutor(1) as thread:
        return thread.submit(asyncio.run, asyncio.wait_for(coro, 30)).result()
