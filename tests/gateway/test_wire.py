"""The links' HTTP/1.1 transport (``rewind.gateway.wire``) against real TCP and TLS servers.

Each server here is a real socket server scripted byte by byte, so every framing the transport
must read (and every way a server can break one) is sent exactly; the whole gateway suite also
runs its calls through this transport against the guest shell served by uvicorn.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from rewind.gateway.wire import KeptAliveTransport, upstream_transport
from tests.gateway.scripted import Reply, Scripted, chunked, ok, run
from zvmsim.tls import ensure_certs


def client(**kwargs: Any) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(transport=KeptAliveTransport(**kwargs), timeout=httpx2.Timeout(5.0))


def test_calls_share_one_kept_alive_connection_whatever_the_framing() -> None:
    interim = b"HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n"

    async def scenario() -> None:
        async with Scripted(ok(b'{"a": 1}'), chunked(b"two ", b"pieces"), interim + ok(b"after hints")) as server:
            async with client() as http:
                first = await http.get(server.url + "/one?q=1")
                second = await http.post(server.url + "/two", content=b"payload")
                third = await http.get(server.url + "/three")
        assert (first.status_code, first.json(), first.headers["content-type"]) == (200, {"a": 1}, "application/json")
        assert second.content == b"two pieces"
        assert (third.status_code, third.content) == (200, b"after hints")
        assert server.connections == 1
        assert server.requests[0][0].startswith(b"GET /one?q=1 HTTP/1.1\r\n")
        assert server.requests[1] == (server.requests[1][0], b"payload")

    run(scenario())


def test_a_request_body_of_unknown_length_is_sent_chunked() -> None:
    async def pieces() -> AsyncIterator[bytes]:
        for piece in (b"one,", b"", b"two"):
            yield piece

    async def scenario() -> None:
        async with Scripted(ok(b"{}")) as server:
            async with client() as http:
                response = await http.post(server.url + "/", content=pieces())
        assert response.status_code == 200
        assert b"transfer-encoding: chunked" in server.requests[0][0].lower()
        assert server.requests[0][1] == b"one,two"

    run(scenario())


def test_an_event_stream_is_handed_up_as_it_is_written() -> None:
    """The second event is only written once the client has read the first: a transport that
    waited for the whole body would never see either."""
    first_read = asyncio.Event()

    async def stream(writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        event = b"data: one\n\n"
        writer.write(b"%x\r\n%s\r\n" % (len(event), event))
        await writer.drain()
        await first_read.wait()
        event = b"data: two\n\n"
        writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(event), event))
        await writer.drain()
        return False

    async def scenario() -> list[str]:
        lines = []
        async with Scripted(stream) as server, client() as http:
            async with http.stream("GET", server.url + "/sse") as response:
                async for line in response.aiter_lines():
                    lines.append(line)
                    first_read.set()
        return lines

    assert [line for line in run(scenario()) if line] == ["data: one", "data: two"]


def test_a_connection_the_server_closed_is_not_reused() -> None:
    async def answer_then_hang_up(writer: asyncio.StreamWriter) -> bool:
        writer.write(ok(b"first"))  # no "Connection: close": the client cannot know but by the close itself
        await writer.drain()
        return True

    async def scenario() -> None:
        async with Scripted(answer_then_hang_up, ok(b"second")) as server, client() as http:
            assert (await http.get(server.url)).content == b"first"
            await asyncio.sleep(0.2)  # the close arrives
            server.replies.insert(0, ok(b"second"))
            assert (await http.get(server.url)).content == b"second"
            assert server.connections == 2

    run(scenario())


def test_a_body_read_in_part_or_framed_by_the_close_does_not_go_back_to_the_pool() -> None:
    until_close = b"HTTP/1.1 200 OK\r\n\r\nto the end"

    async def hang_up(writer: asyncio.StreamWriter) -> bool:
        writer.write(until_close)
        await writer.drain()
        return True

    async def scenario() -> None:
        async with Scripted(chunked(b"a" * 10, b"b" * 10), hang_up, ok(b"third"), ok(b"fourth")) as server:
            async with client() as http:
                async with http.stream("GET", server.url) as response:
                    async for _ in response.aiter_raw():
                        break  # left unread: the connection is closed, not reused
                assert (await http.get(server.url)).content == b"to the end"
                assert (await http.get(server.url)).content == b"third"
                assert (await http.get(server.url)).content == b"fourth"
        assert server.connections == 3

    run(scenario())


async def _never_answer(writer: asyncio.StreamWriter) -> bool:
    await asyncio.sleep(10)
    return True


async def _hang_up(writer: asyncio.StreamWriter) -> bool:
    return True


async def _cut_body(writer: asyncio.StreamWriter) -> bool:
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly ten b")
    await writer.drain()
    return True


@pytest.mark.parametrize(
    ("reply", "error", "says"),
    [
        (_hang_up, httpx2.RemoteProtocolError, "Server disconnected without sending a response"),
        (_cut_body, httpx2.RemoteProtocolError, "closed the connection inside"),
        (_never_answer, httpx2.ReadTimeout, "no answer within 0.3 s"),
        (b"SMTP ready\r\n\r\n", httpx2.RemoteProtocolError, "not an HTTP/1.1 status line"),
        (b"HTTP/1.1 200 OK\r\n folded: header\r\n\r\n", httpx2.RemoteProtocolError, "not an HTTP header line"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nab", httpx2.RemoteProtocolError, "invalid"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", httpx2.RemoteProtocolError, "chunk size"),
        (b"HTTP/1.1 200 OK\r\nX: " + b"x" * 70_000 + b"\r\n\r\n", httpx2.RemoteProtocolError, "over 65536 bytes"),
    ],
    ids=["no-answer", "cut-body", "read-timeout", "not-http", "folded", "two-lengths", "bad-chunk", "huge-head"],
)
def test_a_broken_answer_is_httpx_own_error(reply: Reply, error: type[Exception], says: str) -> None:
    async def scenario() -> None:
        async with Scripted(reply) as server:
            async with httpx2.AsyncClient(transport=KeptAliveTransport(), timeout=httpx2.Timeout(0.3)) as http:
                with pytest.raises(error, match=says):
                    await http.get(server.url)

    run(scenario())


def test_nobody_listening_is_a_connect_error() -> None:
    async def scenario() -> None:
        async with Scripted() as server:
            url = server.url
        async with client() as http:
            with pytest.raises(httpx2.ConnectError):
                await http.get(url)

    run(scenario())


def test_tls_is_verified_against_the_context_given(tmp_path: Path) -> None:
    certs = ensure_certs(tmp_path, ["127.0.0.1", "localhost"])
    serving = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    serving.load_cert_chain(certs.cert, certs.key)

    async def scenario() -> None:
        async with Scripted(ok(b"secure"), ok(b"again"), tls=serving) as server:
            async with client(ssl_context=ssl.create_default_context(cafile=str(certs.ca))) as http:
                assert (await http.get(server.url)).content == b"secure"
                assert (await http.get(server.url)).content == b"again"
            assert server.connections == 1
            async with client() as http:  # httpx's default trust: our throwaway CA is not in it
                with pytest.raises(httpx2.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                    await http.get(server.url)

    run(scenario())


def test_a_proxy_in_the_environment_keeps_httpx_own_transport(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    assert isinstance(upstream_transport(), KeptAliveTransport)
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    assert upstream_transport() is None
