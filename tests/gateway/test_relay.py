"""The links' relayed tools/call (``rewind.gateway.relay``): what the SDK's own path would give, every time.

Against the guest shell served by uvicorn (a real SDK server, at 2026-07-28 and, ``--stateful``, in
the handshake era with a session), each call goes through a link whose session relays it, through
one whose SDK client sends it, and through a plain SDK client, and the answers must be the same:
results, isError results, progress, and what the client answered the server's own requests. Against scripted servers
(``tests.gateway.test_wire``), each way an upstream can answer a POST is sent byte by byte.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import secrets
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import MCP_METHOD_HEADER, MCP_PROTOCOL_VERSION_HEADER
from mcp_types import CallToolResult
from mcp_types.jsonrpc import (
    CONNECTION_CLOSED,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    REQUEST_TIMEOUT,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from rewind.gateway.links import Link, UpstreamSpec, link_for, open_client
from rewind.gateway.relay import PipeRelay, Relay, RelayingDispatcher
from rewind.gateway.wire import KeptAliveTransport
from tests.gateway.scripted import Scripted, chunked, ok, run
from tests.gateway.support import GuestShellHttp, GuestShellStdio, run_guestshell
from tests.simfixtures import SimHandle, SimServer

MODERN = MODERN_PROTOCOL_VERSIONS[-1]
STAMP = {MCP_PROTOCOL_VERSION_HEADER: MODERN, MCP_METHOD_HEADER: "tools/call", "mcp-name": "echo"}


def spec_of(shell: GuestShellHttp) -> UpstreamSpec:
    return UpstreamSpec(
        pk=1,
        name="guestshell",
        transport="http",
        url=shell.url,
        headers=tuple(shell.headers.items()),
        command=(),
        env=(),
        connect_timeout_s=5.0,
        call_timeout_s=30.0,
        version="1",
    )


CALLS: list[tuple[str, dict[str, Any]]] = [
    ("exec", {"host": "web01", "command": "echo relayed > /tmp/relay.txt"}),
    ("read_file", {"host": "web01", "path": "/tmp/relay.txt"}),
    ("read_file", {"host": "web01", "path": "/no/such/file"}),  # an isError result
    ("read_file", {"host": "web01"}),  # arguments the server refuses, an isError result too
    ("slow", {"seconds": 1.5}),  # progress on an SSE stream
    ("no_such_tool", {}),
]


def _outcome(result: CallToolResult | BaseException) -> Any:
    if isinstance(result, MCPError):
        return ("error", result.error.code, result.error.message)
    assert isinstance(result, CallToolResult), result
    return result.model_dump(exclude={"meta"})


async def _through_link(link: Link, name: str, arguments: dict[str, Any]) -> tuple[Any, list[Any]]:
    seen: list[Any] = []

    async def note(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    try:
        result: CallToolResult | MCPError = await link.call_tool(name, arguments, note)
    except MCPError as exc:
        result = exc
    return _outcome(result), seen


async def _through_sdk(spec: UpstreamSpec, name: str, arguments: dict[str, Any]) -> tuple[Any, list[Any]]:
    seen: list[Any] = []

    async def note(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async with open_client(spec) as client:
        try:
            result: CallToolResult | MCPError = await client.call_tool(name, arguments, progress_callback=note)
        except MCPError as exc:
            result = exc
    return _outcome(result), seen


async def _three_ways(
    spec: UpstreamSpec, calls: list[tuple[str, dict[str, Any]]], settings: Any
) -> tuple[list[Any], list[Any], list[Any], Relay | PipeRelay | None]:
    """Each call through a link whose session relays it, through one whose SDK client sends it (the
    operators' switch), and through a plain SDK client; and the relaying link's relay."""
    link = Link(spec)
    settings.REWIND_GATEWAY_RELAY = False
    unrelayed_link = link_for(spec)
    relayed, unrelayed, direct = [], [], []
    for name, arguments in calls:
        relayed.append(await _through_link(link, name, arguments))
        unrelayed.append(await _through_link(unrelayed_link, name, arguments))
        direct.append(await _through_sdk(spec, name, arguments))
    assert unrelayed_link.relay is None
    relay = link.relay
    link.discard()
    unrelayed_link.discard()
    return relayed, unrelayed, direct, relay


@pytest.fixture(scope="module")
def stateful_shell_server(tmp_path_factory: pytest.TempPathFactory, sim_server: SimServer) -> Iterator[GuestShellHttp]:
    token = "gs-" + secrets.token_urlsafe(16)
    with run_guestshell(tmp_path_factory.mktemp("stateful-shell"), sim_server, "--stateful", token=token) as shell:
        yield shell


@pytest.fixture
def stateful_shell(stateful_shell_server: GuestShellHttp, sim: SimHandle) -> GuestShellHttp:
    stateful_shell_server.clear()
    return stateful_shell_server


# On its own stream the call asks the client for a ping (answered) and an elicitation, which the
# gateway's client refuses as the SDK's does without a callback; a log line goes to the session.
CONSULT = ("consult", {"question": "go on?"})


@pytest.mark.process  # its guest shell is asked for by name, below
@pytest.mark.parametrize("era", ["2026-07-28", "handshake"])
def test_a_relayed_call_answers_exactly_as_the_sdks_own_path(
    era: str, request: pytest.FixtureRequest, settings: Any
) -> None:
    shell: GuestShellHttp = request.getfixturevalue("guestshell_http" if era == "2026-07-28" else "stateful_shell")
    spec = spec_of(shell)
    calls = CALLS if era == "2026-07-28" else [*CALLS, CONSULT]

    relayed, unrelayed, direct, relay = run(_three_ways(spec, calls, settings))
    assert isinstance(relay, Relay)
    count, session_id = relay.relayed, relay.session_id
    assert relayed == direct
    assert unrelayed == direct
    assert count == len(calls)  # every one went through the relay, none through the SDK's dispatcher
    assert (session_id is None) == (era == "2026-07-28")  # a stateful server refuses a POST without it
    outcomes = [outcome for outcome, _ in relayed]
    assert outcomes[1]["structured_content"] == {"result": "relayed\n"}
    assert outcomes[2]["is_error"]
    assert not outcomes[1]["is_error"]
    assert outcomes[3]["is_error"]
    assert "path\n  Field required" in outcomes[3]["content"][0]["text"]
    assert outcomes[5]["content"][0]["text"] == "Unknown tool: no_such_tool"
    slow_progress = relayed[4][1]
    assert [value for value, _, _ in slow_progress] == [1.0, 1.5]
    assert slow_progress[-1][2] == "1.5 of 1.5 s"
    if era == "handshake":
        assert outcomes[6]["structured_content"] == {
            "result": "ping answered; elicitation refused: Elicitation not supported"
        }


def stdio_spec_of(shell: GuestShellStdio) -> UpstreamSpec:
    return UpstreamSpec(
        pk=2,
        name="guestshell",
        transport="stdio",
        url="",
        headers=(),
        command=tuple(shell.argv),
        env=tuple(shell.env.items()),
        connect_timeout_s=10.0,
        call_timeout_s=30.0,
        version="1",
    )


@pytest.mark.process  # it starts the stdio guest shell, three times
def test_a_call_relayed_over_stdio_answers_exactly_as_the_sdks_own_path(
    guestshell_stdio_command: GuestShellStdio, settings: Any
) -> None:
    # --stateful over stdio only adds consult, which asks the client on the call's own stream.
    base = guestshell_stdio_command
    shell = GuestShellStdio([*base.argv, "--stateful"], base.env, base.record)
    spec = stdio_spec_of(shell)
    calls = [*CALLS, CONSULT]

    relayed, unrelayed, direct, relay = run(_three_ways(spec, calls, settings))
    assert isinstance(relay, PipeRelay)
    count = relay.relayed
    assert relayed == direct
    assert unrelayed == direct
    assert count == len(calls)  # every one written by the relay, none by the SDK's dispatcher
    outcomes = [outcome for outcome, _ in relayed]
    assert outcomes[1]["structured_content"] == {"result": "relayed\n"}
    assert outcomes[2]["is_error"]
    assert outcomes[3]["is_error"]
    assert outcomes[5]["content"][0]["text"] == "Unknown tool: no_such_tool"
    slow_progress = relayed[4][1]
    assert [value for value, _, _ in slow_progress] == [1.0, 1.5]
    assert outcomes[6]["structured_content"]["result"].startswith("ping ")
    reached = [call["tool"] for call in shell.calls() if call["tool"] == "exec"]
    assert len(reached) == 3  # each way ran the write once, on the child it started


@pytest.mark.process  # it starts the stdio guest shell
def test_concurrent_calls_relayed_over_one_stdio_session_each_get_their_own_answer(
    guestshell_stdio_command: GuestShellStdio,
) -> None:
    """The answers come back on one pipe in whatever order the server finishes: each reaches its call."""
    spec = stdio_spec_of(guestshell_stdio_command)
    hosts = ["web01", "app01", "db01"]

    async def scenario() -> list[Any]:
        link = Link(spec)
        try:
            for n, host in enumerate(hosts):
                await link.call_tool("exec", {"host": host, "command": f"echo {host}-{n} > /tmp/mine.txt"})
            reads = [link.call_tool("read_file", {"host": host, "path": "/tmp/mine.txt"}) for host in hosts * 8]
            results = await asyncio.gather(*reads)
            assert isinstance(link.relay, PipeRelay)
            assert link.relay.relayed == len(hosts) + len(reads)
            return [r.structured_content for r in results]
        finally:
            link.discard()

    got = run(scenario())
    assert got == [{"result": f"{host}-{n}\n"} for host, n in zip(hosts, range(3), strict=True)] * 8


# -- each way an upstream can answer the POST, byte by byte ---------------------------------------
def _relay(url: str, hooked: list[int] | None = None) -> Relay:
    async def hook(response: httpx2.Response) -> None:
        if hooked is not None:
            hooked.append(response.status_code)

    http = httpx2.AsyncClient(headers={"Authorization": "Bearer upstream-credential"}, timeout=5.0)
    return Relay(f"{url}/mcp", http, KeptAliveTransport(), hook)


def _sse(*events: dict[str, Any] | str) -> bytes:
    body = b"".join(
        (b": keep-alive\n\n" if e == "ping" else b"event: message\ndata: %s\n\n" % json.dumps(e).encode())
        for e in events
    )
    return b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n" % len(body) + body


def _status(code: int, body: bytes = b"", kind: bytes = b"text/plain") -> bytes:
    head = b"HTTP/1.1 %d X\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n" % (code, kind, len(body))
    return head + body


RESULT = {"content": [{"type": "text", "text": "hi"}], "isError": False}


def _call(relay: Relay, *, progress: list[Any] | None = None, timeout: float = 5.0) -> Any:
    seen = progress

    async def note(progress: float, total: float | None, message: str | None) -> None:
        assert seen is not None
        seen.append((progress, total, message))

    opts: dict[str, Any] = {"headers": dict(STAMP), "timeout": timeout}
    if progress is not None:
        opts["on_progress"] = note
    params = {"name": "echo", "arguments": {"text": "hi"}, "_meta": {"io.modelcontextprotocol/protocolVersion": MODERN}}
    return relay.tool_call(params, opts)  # type: ignore[arg-type]


def test_the_post_carries_the_upstreams_credentials_the_stamp_and_a_progress_token() -> None:
    async def scenario() -> tuple[Any, list[tuple[bytes, bytes]], list[int]]:
        hooked: list[int] = []
        answer = {"jsonrpc": "2.0", "id": "relay-1", "result": RESULT}
        async with Scripted(ok(json.dumps(answer).encode())) as server:
            result = await _call(_relay(server.url, hooked), progress=[])
            return result, server.requests, hooked

    result, requests, hooked = run(scenario())
    assert result == RESULT
    assert hooked == [200]  # the link's hook sees every answer, as it does on the SDK's path
    head, body = requests[0]
    lines = head.decode().lower().split("\r\n")
    assert lines[0] == "post /mcp http/1.1"
    for header in (
        "authorization: bearer upstream-credential",
        "accept: application/json, text/event-stream",
        "content-type: application/json",
        f"mcp-protocol-version: {MODERN}",
        "mcp-method: tools/call",
        "mcp-name: echo",
    ):
        assert header in lines, header
    assert [line.split(":")[0] for line in lines].count("accept") == 1  # the transport's, not httpx's default too
    sent = json.loads(body)
    assert sent["method"] == "tools/call"
    assert sent["id"] == "relay-1"
    assert sent["params"]["_meta"]["progressToken"] == "relay-1"
    assert sent["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] == MODERN


def _gzipped(answer: dict[str, Any]) -> bytes:
    body = gzip.compress(json.dumps(answer).encode())
    return ok(body, b"Content-Encoding: gzip")


def _sse_in_pieces(answer: dict[str, Any]) -> bytes:
    """An SSE answer whose event is cut mid-line across chunks, as a proxy may cut it."""
    event = b"event: message\ndata: " + json.dumps(answer).encode() + b"\n\n"
    head = chunked(event[:9], event[9:30], event[30:])
    return head.replace(b"Transfer-Encoding", b"Content-Type: text/event-stream\r\nTransfer-Encoding")


@pytest.mark.parametrize("shape", [_gzipped, _sse_in_pieces], ids=["gzip", "sse-in-pieces"])
def test_an_answer_compressed_or_cut_into_pieces_is_read_whole(shape: Any) -> None:
    async def scenario() -> Any:
        async with Scripted(shape({"jsonrpc": "2.0", "id": "relay-1", "result": RESULT})) as server:
            return await _call(_relay(server.url))

    assert run(scenario()) == RESULT


def test_progress_on_the_stream_reaches_the_callback_and_the_first_answer_ends_it() -> None:
    progress_event = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {}}
    events: list[dict[str, Any] | str] = [
        {**progress_event, "params": {"progressToken": "relay-1", "progress": 1, "total": 2, "message": "half"}},
        {**progress_event, "params": {"progressToken": "someone-else", "progress": 9}},  # not this call's
        {**progress_event, "params": {"progressToken": "relay-1", "progress": True}},  # not a number
        {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "x"}},
        "ping",
        {"jsonrpc": "2.0", "id": 7, "result": RESULT},  # the POST's stream answers it, whatever id it quotes
        {"jsonrpc": "2.0", "id": "relay-1", "result": {"content": [], "isError": True}},
    ]

    async def scenario() -> tuple[Any, list[Any]]:
        progress: list[Any] = []
        async with Scripted(_sse(*events)) as server:
            return await _call(_relay(server.url), progress=progress), progress

    result, progress = run(scenario())
    assert result == RESULT
    assert progress == [(1.0, 2.0, "half")]


@pytest.mark.parametrize(
    ("reply", "code", "message"),
    [
        (
            ok(json.dumps({"jsonrpc": "2.0", "id": "relay-1", "error": {"code": -32042, "message": "no"}}).encode()),
            -32042,
            "no",
        ),
        (_status(202), INVALID_REQUEST, "server answered a request with 202 Accepted"),
        (_status(404), METHOD_NOT_FOUND, "Not Found"),
        (_status(500, b"boom"), INTERNAL_ERROR, "Server returned an error response"),
        (
            _status(
                400,
                json.dumps(
                    {"jsonrpc": "2.0", "id": None, "error": {"code": INVALID_PARAMS, "message": "bad"}}
                ).encode(),
                b"application/json",
            ),
            INVALID_PARAMS,
            "bad",
        ),
        (_status(200, b"<html>", b"text/html"), INVALID_REQUEST, "Unexpected content type: text/html"),
        (_status(200, b"{not json", b"application/json"), -32700, "Failed to parse JSON response"),
        (_sse({"jsonrpc": "2.0", "method": "notifications/message", "params": {}}), CONNECTION_CLOSED, "ended"),
    ],
)
def test_each_other_answer_is_the_error_the_sdks_transport_gives(reply: bytes, code: int, message: str) -> None:
    async def scenario() -> MCPError:
        async with Scripted(reply) as server:
            with pytest.raises(MCPError) as raised:
                await _call(_relay(server.url))
            return raised.value

    error = run(scenario())
    assert error.error.code == code
    assert message in error.error.message


def test_a_call_past_its_timeout_is_request_timeout_and_its_connection_is_dropped() -> None:
    async def never(writer: asyncio.StreamWriter) -> bool:
        await asyncio.sleep(30)
        return True

    async def scenario() -> tuple[MCPError, Any, int]:
        answer = ok(json.dumps({"jsonrpc": "2.0", "id": "relay-2", "result": RESULT}).encode())
        async with Scripted(never, answer) as server:
            relay = _relay(server.url)
            with pytest.raises(MCPError) as raised:
                await _call(relay, timeout=0.3)
            again = await _call(relay)  # on a new connection: the timed-out one is never reused
            return raised.value, again, server.connections

    error, again, connections = run(scenario())
    assert error.error.code == REQUEST_TIMEOUT
    assert again == RESULT
    assert connections == 2


class _SdkDispatcher:
    """Stands in for the SDK's dispatcher: records what it was handed."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.notified: list[tuple[str, Any]] = []
        self.dispatched: list[Any] = []
        self._closed = False

    async def send_raw_request(self, method: str, params: Any, opts: Any = None, **kwargs: Any) -> dict[str, Any]:
        self.sent.append(method)
        return {"from": "sdk"}

    async def notify(self, method: str, params: Any, opts: Any = None) -> None:
        self.notified.append((method, params))

    async def _dispatch(self, item: Any, on_request: Any, on_notify: Any, sender_ctx: Any) -> None:
        assert (on_request, on_notify) == ("the session's on_request", "the session's on_notify")
        self.dispatched.append(item.message.model_dump(by_alias=True, exclude_none=True))


def _dispatcher(relay: Relay) -> tuple[RelayingDispatcher, _SdkDispatcher]:
    inner = _SdkDispatcher()
    return RelayingDispatcher(inner, relay, "the session's on_request", "the session's on_notify"), inner


HANDSHAKE = {MCP_PROTOCOL_VERSION_HEADER: "2025-11-25"}


def test_only_a_stamped_tools_call_is_relayed_and_a_redirect_goes_back_to_the_sdk() -> None:
    redirect = b"HTTP/1.1 307 Temporary Redirect\r\nLocation: /mcp/\r\nContent-Length: 0\r\n\r\n"

    async def scenario() -> tuple[list[Any], list[str], int]:
        async with Scripted(redirect, redirect) as server:
            relay = _relay(server.url)
            inner = _SdkDispatcher()
            dispatcher = RelayingDispatcher(inner, relay)
            handshake = {MCP_PROTOCOL_VERSION_HEADER: "2025-11-25"}
            answers = [
                await dispatcher.send_raw_request("tools/list", {}, {"headers": dict(STAMP)}),
                await dispatcher.send_raw_request("tools/call", {"name": "echo"}, {}),  # not stamped: the SDK's
                await dispatcher.send_raw_request("tools/call", {"name": "echo"}, {"headers": handshake}),
                await dispatcher.send_raw_request("tools/call", {"name": "echo"}, {"headers": dict(STAMP)}),
            ]
            dispatcher.on_stream_exception = "set"  # written through to the SDK's dispatcher
            assert inner.on_stream_exception == "set"  # type: ignore[attr-defined]
            inner._closed = True
            with pytest.raises(MCPError) as closed:
                await dispatcher.send_raw_request("tools/call", {"name": "echo"}, {"headers": dict(STAMP)})
            assert closed.value.error.code == CONNECTION_CLOSED
            return answers, inner.sent, relay.relayed

    answers, sent, relayed = run(scenario())
    assert answers == [{"from": "sdk"}] * 4
    assert sent == ["tools/list", "tools/call", "tools/call", "tools/call"]  # the redirected ones resent by the SDK
    assert relayed == 2  # both revisions


# -- a stream cut before its answer, resumed with Last-Event-ID as the SDK's transport resumes it -----
def _event(message: dict[str, Any] | None, *, event_id: str | None = None, retry: int | None = None) -> bytes:
    lines = [b"event: message", b"data: %s" % (json.dumps(message).encode() if message else b"")]
    lines += [b"id: %s" % event_id.encode()] if event_id else []
    lines += [b"retry: %d" % retry] if retry is not None else []
    return b"\n".join(lines) + b"\n\n"


def _stream(*events: bytes) -> bytes:
    body = b"".join(events)
    return b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n" % len(body) + body


def _unfinished_stream(*events: bytes) -> bytes:
    """An answer stream's head and its events as chunks, without the chunk that ends it."""
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    return head + b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events)


def _chunked_stream(*events: bytes) -> bytes:
    """An answer stream as SDK servers send it: chunked, its end a chunk of its own after the answer."""
    return _unfinished_stream(*events) + b"0\r\n\r\n"


def _sent_then_hung_up(data: bytes, *, after_s: float = 0.0) -> Any:
    async def reply(writer: asyncio.StreamWriter) -> bool:
        writer.write(data)
        await writer.drain()
        await asyncio.sleep(after_s)
        return True

    return reply


def _broken_stream(*events: bytes) -> Any:
    """A stream that sends its events, then hangs up inside its chunked body."""
    return _sent_then_hung_up(_unfinished_stream(*events))


def _left_open(*events: bytes) -> Any:
    """An answer stream the server keeps open after the answer."""
    return _sent_then_hung_up(_unfinished_stream(*events), after_s=30)


def _progress_event(value: int) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "method": "notifications/progress",
        "params": {"progressToken": "relay-1", "progress": value},
    }


ANSWER = {"jsonrpc": "2.0", "id": "relay-1", "result": RESULT}


@pytest.mark.parametrize("cut", [_stream, _broken_stream], ids=["ended", "broken"])
def test_a_stream_cut_after_an_event_with_an_id_is_resumed_from_that_event(cut: Any) -> None:
    async def scenario() -> tuple[Any, list[Any], list[tuple[bytes, bytes]]]:
        progress: list[Any] = []
        first = cut(_event(None, event_id="e0", retry=10), _event(_progress_event(1), event_id="e1"))
        rest = _stream(_event(_progress_event(2), event_id="e2"), _event(ANSWER, event_id="e3"))
        async with Scripted(first, rest) as server:
            return await _call(_relay(server.url), progress=progress), progress, server.requests

    result, progress, requests = run(scenario())
    assert result == RESULT
    assert progress == [(1.0, None, None), (2.0, None, None)]  # from both streams
    assert len(requests) == 2
    lines = requests[1][0].decode().lower().split("\r\n")
    assert lines[0] == "get /mcp http/1.1"
    for header in (
        "last-event-id: e1",
        f"mcp-protocol-version: {MODERN}",
        "authorization: bearer upstream-credential",
        "accept: application/json, text/event-stream",
        "cache-control: no-store",
    ):
        assert header in lines, header
    assert requests[1][1] == b""


def test_a_resumed_stream_that_ends_again_is_resumed_from_its_own_last_event() -> None:
    async def scenario() -> tuple[Any, list[tuple[bytes, bytes]]]:
        first = _stream(_event(_progress_event(1), event_id="e1", retry=10))
        second = _stream(_event(_progress_event(2), event_id="e2"))
        async with Scripted(first, second, _stream(_event(ANSWER))) as server:
            return await _call(_relay(server.url)), server.requests

    result, requests = run(scenario())
    assert result == RESULT
    resumed_from = [
        line for head, _ in requests[1:] for line in head.decode().lower().split("\r\n") if "last-event" in line
    ]
    assert resumed_from == ["last-event-id: e1", "last-event-id: e2"]


@pytest.mark.parametrize(
    "refusal", [_status(503, b"busy"), _status(200, b"{}", b"application/json")], ids=["503", "not-a-stream"]
)
def test_a_stream_whose_resumption_fails_twice_in_a_row_is_connection_closed(refusal: bytes) -> None:
    async def scenario() -> tuple[MCPError, int]:
        first = _stream(_event(_progress_event(1), event_id="e1", retry=10))
        async with Scripted(first, refusal, refusal, _stream(_event(ANSWER))) as server:
            with pytest.raises(MCPError) as raised:
                await _call(_relay(server.url))
            return raised.value, len(server.requests)

    error, requests = run(scenario())
    assert error.error.code == CONNECTION_CLOSED
    assert "reconnection attempts were exhausted" in error.error.message
    assert requests == 3  # the POST and two GETs; the answer waiting on the fourth was never asked for


def test_a_stream_without_an_event_id_is_not_resumed() -> None:
    async def scenario() -> tuple[MCPError, type[BaseException], int]:
        async with Scripted(_stream(_event(_progress_event(1))), _broken_stream(_event(_progress_event(1)))) as server:
            relay = _relay(server.url)
            with pytest.raises(MCPError) as ended:
                await _call(relay)
            with pytest.raises(httpx2.TransportError) as broke:
                await _call(relay)
            return ended.value, type(broke.value), len(server.requests)

    ended, broke, requests = run(scenario())
    assert ended.error.code == CONNECTION_CLOSED
    assert "SSE stream ended without a response" in ended.error.message
    assert issubclass(broke, httpx2.RemoteProtocolError)  # the link's "may have run"
    assert requests == 2  # no GET


# -- a handshake-era session: its id, the server's requests, the courtesy cancellation --------------
def test_a_handshake_call_carries_the_session_id_and_a_404_to_it_is_session_terminated() -> None:
    async def scenario() -> tuple[MCPError, bytes, list[int]]:
        hooked: list[int] = []
        async with Scripted(_status(404, b"Session not found")) as server:
            relay = _relay(server.url, hooked)
            initialize = httpx2.Response(200, headers={"mcp-session-id": "s-1"})
            await relay.learn_session(initialize)
            await relay.learn_session(httpx2.Response(200, headers={"mcp-session-id": "s-2"}))  # the first one stays
            dispatcher, _ = _dispatcher(relay)
            with pytest.raises(MCPError) as raised:
                await dispatcher.send_raw_request("tools/call", {"name": "echo"}, {"headers": dict(HANDSHAKE)})
            return raised.value, server.requests[0][0], hooked

    error, head, hooked = run(scenario())
    assert "mcp-session-id: s-1" in head.decode().lower().split("\r\n")
    assert (error.error.code, error.error.message) == (INVALID_REQUEST, "Session terminated")
    assert hooked == [404]  # the link's hook sees it, and opens a new session for the call (tests/gateway/test_heal.py)


def test_a_2026_call_never_carries_a_session_id() -> None:
    async def scenario() -> bytes:
        async with Scripted(ok(json.dumps(ANSWER).encode())) as server:
            relay = _relay(server.url)
            await relay.learn_session(httpx2.Response(200, headers={"mcp-session-id": "s-1"}))
            await _call(relay)
            return server.requests[0][0]

    assert b"mcp-session-id" not in run(scenario()).lower()


def test_what_the_stream_carries_besides_the_answer_and_the_calls_progress_goes_to_the_sdk() -> None:
    ping = {"jsonrpc": "2.0", "id": 5, "method": "ping"}
    log = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "x"}}
    other_progress = {**_progress_event(3), "params": {"progressToken": 99, "progress": 3}}
    events = [_event(ping), _event(_progress_event(1)), _event(log), _event(other_progress), _event(ANSWER)]

    async def scenario() -> tuple[Any, list[Any], list[Any]]:
        progress: list[Any] = []

        async def note(value: float, total: float | None, message: str | None) -> None:
            progress.append(value)

        async with Scripted(_stream(*events)) as server:
            dispatcher, inner = _dispatcher(_relay(server.url))
            opts: Any = {"headers": dict(HANDSHAKE), "on_progress": note}
            result = await dispatcher.send_raw_request("tools/call", {"name": "echo"}, opts)
            return result, progress, inner.dispatched

    result, progress, dispatched = run(scenario())
    assert result == RESULT
    assert progress == [1.0]
    assert dispatched == [ping, log, other_progress]  # in the order they came, the SDK answers the ping


@pytest.mark.parametrize("era", [HANDSHAKE, STAMP], ids=["handshake", "2026-07-28"])
def test_a_call_given_up_is_handed_to_the_sdks_courtesy_cancellation(era: dict[str, str]) -> None:
    """Timed out, or its caller cancelled: the SDK's dispatcher is told, as for its own requests (its
    transport posts the cancellation on a handshake-era session and swallows it at 2026-07-28)."""

    async def never(writer: asyncio.StreamWriter) -> bool:
        await asyncio.sleep(30)
        return True

    async def scenario() -> tuple[MCPError, list[tuple[str, Any]], int]:
        async with Scripted(never, never) as server:
            dispatcher, inner = _dispatcher(_relay(server.url))
            with pytest.raises(MCPError) as timed_out:
                await dispatcher.send_raw_request("tools/call", {"name": "echo"}, {"headers": era, "timeout": 0.3})
            task = asyncio.create_task(dispatcher.send_raw_request("tools/call", {"name": "echo"}, {"headers": era}))
            while server.connections < 2:
                await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            return timed_out.value, inner.notified, server.connections

    timed_out, notified, connections = run(scenario())
    assert timed_out.error.code == REQUEST_TIMEOUT
    assert notified == [
        ("notifications/cancelled", {"requestId": "relay-1", "reason": "timed out after 0.3s"}),
        ("notifications/cancelled", {"requestId": "relay-2", "reason": "caller cancelled"}),
    ]
    assert connections == 2  # each POST's connection was dropped, never reused


# -- an answered stream is read to its end, so that its connection is kept ----------------------------
def test_an_answered_stream_is_read_to_its_end_and_its_connection_used_again() -> None:
    answer = _chunked_stream(_event(_progress_event(1)), _event(ANSWER))

    async def scenario() -> tuple[list[Any], int]:
        async with Scripted(answer, answer, answer) as server:
            relay = _relay(server.url)
            return [await _call(relay) for _ in range(3)], server.connections

    results, connections = run(scenario())
    assert results == [RESULT] * 3
    assert connections == 1


def test_a_server_that_keeps_its_answered_streams_open_is_not_waited_for_again() -> None:
    async def scenario() -> tuple[list[Any], int, float]:
        answer = _event(ANSWER)
        async with Scripted(_left_open(answer), _left_open(answer), ok(json.dumps(ANSWER).encode())) as server:
            relay = _relay(server.url)
            results = [await _call(relay) for _ in range(3)]
            return results, server.connections, relay._end_wait_s

    results, connections, end_wait_s = run(scenario())
    assert results == [RESULT] * 3  # each answered at its answer, the stream left open or not
    assert end_wait_s == 0.0
    assert connections == 3  # each stream left open is closed with its connection


def test_reading_on_after_the_answer_never_turns_it_into_a_timeout() -> None:
    """The call's own timeout falls inside the wait for the stream's end: the answer stands."""

    async def scenario() -> tuple[Any, float]:
        async with Scripted(_left_open(_event(ANSWER))) as server:
            relay = _relay(server.url)
            result = await _call(relay, timeout=0.2)
            return result, relay._end_wait_s

    result, end_wait_s = run(scenario())
    assert result == RESULT
    assert end_wait_s > 0  # cut short by the call's deadline, not a server that keeps streams open
