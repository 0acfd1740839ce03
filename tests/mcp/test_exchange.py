"""``rewind.mcp.exchange`` answers every 2026-07-28 POST as the SDK's own entry does, byte for byte.

Each request goes to a small SDK server twice, in one event loop: once through the SDK's app
alone, once through ``ModernPosts`` in front of it. The ASGI messages each sends back are
compared whole: status, headers and body, a JSON answer or every frame of an event stream.
Where the two may differ by design (when a silent call's keepalive pings fall), the test says so.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import AnyHttpUrl

from rewind.mcp import exchange
from rewind.mcp.exchange import ModernPosts

TOKEN = "exchange-test-token"
PROTOCOL = "2026-07-28"
META = {"io.modelcontextprotocol/protocolVersion": PROTOCOL, "io.modelcontextprotocol/clientCapabilities": {}}
HOST = "127.0.0.1:8000"
PING = b": ping\r\n\r\n"  # the SDK's keepalive comment on an event stream


class _Tokens:
    async def verify_token(self, token: str) -> AccessToken | None:
        if token != TOKEN:
            return None
        return AccessToken(token=token, client_id="agent-x", scopes=["mcp"], expires_at=None)


class _Slow:
    """What the ``slow`` tool saw: it started, and whether it was cancelled."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.cancelled = False


def _server(slow: _Slow) -> tuple[MCPServer, Any]:
    server = MCPServer(
        name="exchange-test",
        token_verifier=_Tokens(),
        auth=AuthSettings(issuer_url=AnyHttpUrl("http://127.0.0.1:8000"), resource_server_url=None),
    )

    @server.tool()
    async def echo(text: str) -> str:
        return text

    @server.tool()
    async def fails() -> str:
        raise ValueError("this tool always fails")

    @server.tool()
    async def counts(ctx: Context) -> str:
        await ctx.report_progress(1, 3, "one")
        await ctx.report_progress(2, 3)
        return "counted"

    @server.tool()
    async def waits() -> str:
        slow.started.set()
        try:
            await slow.release.wait()
        except asyncio.CancelledError:
            slow.cancelled = True
            raise
        return "released"

    app = server.streamable_http_app(
        stateless_http=True,
        json_response=False,
        transport_security=TransportSecuritySettings(
            enable_dns_rebinding_protection=True, allowed_hosts=[HOST], allowed_origins=["http://127.0.0.1:8000"]
        ),
    )
    return server, app


class _SdkEntry:
    """Counts the POSTs the SDK's own entry served, so a test knows which side answered."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from mcp.server import streamable_http_manager

        self.served = 0
        entry = streamable_http_manager.handle_modern_request

        async def counted(*args: Any) -> None:
            self.served += 1
            await entry(*args)

        monkeypatch.setattr(streamable_http_manager, "handle_modern_request", counted)


@pytest.fixture
def sdk_entry(monkeypatch: pytest.MonkeyPatch) -> _SdkEntry:
    return _SdkEntry(monkeypatch)


@asynccontextmanager
async def _apps(slow: _Slow) -> AsyncIterator[tuple[Any, Any]]:
    """The SDK's app and the same behind ``ModernPosts``, its session manager running."""
    server, sdk_app = _server(slow)
    async with server.session_manager.run():
        yield sdk_app, ModernPosts(sdk_app, server, _Tokens())


def _headers(method: str | None = "tools/call", name: str | None = None, **extra: str) -> dict[str, str]:
    headers = {
        "host": HOST,
        "authorization": f"Bearer {TOKEN}",
        "content-type": "application/json",
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": PROTOCOL,
    }
    if method is not None:
        headers["mcp-method"] = method
    if name is not None:
        headers["mcp-name"] = name
    headers.update(extra)
    return headers


def _call(name: str, arguments: Any = None, *, rpc_id: Any = 1, meta: dict[str, Any] | None = None) -> bytes:
    params: dict[str, Any] = {"name": name, "_meta": {**META, **(meta or {})}}
    if arguments is not None:
        params["arguments"] = arguments
    return json.dumps({"jsonrpc": "2.0", "id": rpc_id, "method": "tools/call", "params": params}).encode()


async def _post(
    app: Any,
    headers: dict[str, str] | list[tuple[str, str]],
    body: bytes,
    *,
    gone: asyncio.Event | None = None,
    sent: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """The ASGI messages ``app`` sends for one POST (also into ``sent`` as they go); ``gone`` set: the
    client disconnects then."""
    pairs = list(headers.items()) if isinstance(headers, dict) else headers
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/mcp",
        "raw_path": b"/mcp",
        "query_string": b"",
        "root_path": "",
        "headers": [(k.lower().encode(), v.encode()) for k, v in pairs],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }
    first = True
    disconnect = gone or asyncio.Event()

    async def receive() -> dict[str, Any]:
        nonlocal first
        if first:
            first = False
            return {"type": "http.request", "body": body, "more_body": False}
        await disconnect.wait()
        return {"type": "http.disconnect"}

    messages: list[dict[str, Any]] = [] if sent is None else sent

    async def send(message: dict[str, Any]) -> None:
        messages.append(dict(message))

    await app(scope, receive, send)
    return messages


def _both(
    headers: dict[str, str] | list[tuple[str, str]], body: bytes
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    async def go() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        async with _apps(_Slow()) as (sdk_app, ours):
            return await _post(sdk_app, headers, body), await _post(ours, headers, body)

    return asyncio.run(go())


CASES: dict[str, tuple[dict[str, str] | list[tuple[str, str]], bytes]] = {
    "a result": (_headers(name="echo"), _call("echo", {"text": "hello"})),
    "a string id": (_headers(name="echo"), _call("echo", {"text": "hi"}, rpc_id="req-7")),
    "a tool that raises": (_headers(name="fails"), _call("fails", {})),
    "an unknown tool": (_headers(name="nothing"), _call("nothing", {})),
    "arguments that do not fit": (_headers(name="echo"), _call("echo", {"text": 3})),
    "arguments that are no object": (_headers(name="echo"), _call("echo", "text")),
    "an Mcp-Name that is not the body's": (_headers(name="fails"), _call("echo", {"text": "x"})),
    "no Mcp-Name": (_headers(), _call("echo", {"text": "x"})),
    "an Mcp-Method that is not the body's": (_headers("tools/list", "echo"), _call("echo", {"text": "x"})),
    "a routing header twice": (
        [*_headers(name="echo").items(), ("mcp-name", "echo")],
        _call("echo", {"text": "x"}),
    ),
    "no protocol version in _meta": (
        _headers(name="echo"),
        json.dumps(
            {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "x"}}}
        ).encode(),
    ),
    "a listing": (
        _headers("tools/list"),
        json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": META}}).encode(),
    ),
    "an unknown method": (
        _headers("tools/frobnicate"),
        json.dumps({"jsonrpc": "2.0", "id": 3, "method": "tools/frobnicate", "params": {"_meta": META}}).encode(),
    ),
    "a body that is no JSON": (_headers(name="echo"), b'{"jsonrpc": "2.0", "id": 1,'),
    "a batch": (_headers(name="echo"), b"[]"),
    "a notification": (
        _headers("notifications/cancelled"),
        json.dumps({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}).encode(),
    ),
    "an Accept without event streams": (
        _headers(name="echo", accept="application/json"),
        _call("echo", {"text": "x"}),
    ),
    "a Host not allowed": (_headers(name="echo", host="evil.example:8000"), _call("echo", {"text": "x"})),
    "progress asked for": (_headers(name="counts"), _call("counts", {}, meta={"progressToken": "p-1"})),
    "progress asked for as a number": (_headers(name="counts"), _call("counts", {}, meta={"progressToken": 9})),
    "a tool that reports progress nobody asked for": (_headers(name="counts"), _call("counts", {})),
}


@pytest.mark.parametrize("case", list(CASES))
def test_it_answers_exactly_as_the_sdks_entry(case: str, sdk_entry: _SdkEntry) -> None:
    headers, body = CASES[case]
    sdk, ours = _both(headers, body)
    assert sdk, "the SDK answered"
    assert sdk_entry.served == 1, "the SDK's entry served its own POST, and ours never reached it"
    assert ours == sdk


def test_the_cases_cover_json_answers_refusals_and_event_streams() -> None:
    # The comparison above means something only if the SDK itself answered these ways.
    statuses = set()
    kinds = set()
    for headers, body in CASES.values():
        sdk, _ = _both(headers, body)
        start = sdk[0]
        statuses.add(start["status"])
        kinds.add(dict(start["headers"]).get(b"content-type"))
    assert {200, 202, 400, 406} <= statuses, statuses
    assert {b"application/json", b"text/event-stream"} <= kinds, kinds


def test_progress_goes_out_as_events_before_the_answer() -> None:
    headers, body = CASES["progress asked for"]
    _, ours = _both(headers, body)
    assert dict(ours[0]["headers"])[b"content-type"] == b"text/event-stream"
    frames = [json.loads(m["body"].decode().split("data: ", 1)[1]) for m in ours[1:]]
    assert [f.get("method") for f in frames] == ["notifications/progress", "notifications/progress", None]
    assert frames[0]["params"] == {"progressToken": "p-1", "progress": 1.0, "total": 3.0, "message": "one"}
    assert frames[-1]["result"]["content"][0]["text"] == "counted"
    assert [m.get("more_body") for m in ours[1:]] == [True, True, False]


def _race(
    act: Callable[[Any, _Slow, asyncio.Event], Awaitable[list[dict[str, Any]]]],
) -> tuple[list[dict[str, Any]], _Slow, list[dict[str, Any]], _Slow]:
    """``act`` run against the SDK's app and against ours, each with a fresh ``waits`` tool."""

    async def one(ours: bool) -> tuple[list[dict[str, Any]], _Slow]:
        slow = _Slow()
        async with _apps(slow) as (sdk_app, modern):
            return await act(modern if ours else sdk_app, slow, asyncio.Event()), slow

    async def go() -> tuple[list[dict[str, Any]], _Slow, list[dict[str, Any]], _Slow]:
        sdk, sdk_slow = await one(False)
        ours, our_slow = await one(True)
        return sdk, sdk_slow, ours, our_slow

    return asyncio.run(go())


def test_a_client_that_disconnects_cancels_its_call_and_is_sent_nothing(sdk_entry: _SdkEntry) -> None:
    async def act(app: Any, slow: _Slow, gone: asyncio.Event) -> list[dict[str, Any]]:
        posting = asyncio.create_task(_post(app, _headers(name="waits"), _call("waits", {}), gone=gone))
        await asyncio.wait_for(slow.started.wait(), 10)
        gone.set()
        done, _ = await asyncio.wait({posting}, timeout=10)  # waits without cancelling it
        if posting not in done:
            slow.release.set()
            await posting
            raise AssertionError("the call went on after its client had gone")
        return posting.result()

    sdk, sdk_slow, ours, our_slow = _race(act)
    assert sdk_entry.served == 1
    assert sdk_slow.cancelled, "the SDK's entry cancels it"
    assert our_slow.cancelled, "so does ours"
    assert ours == sdk == []


def test_a_silent_call_is_pinged_on_an_event_stream_then_answered_on_it(
    monkeypatch: pytest.MonkeyPatch, sdk_entry: _SdkEntry
) -> None:
    from mcp.server import _streamable_http_modern as sdk_module

    monkeypatch.setattr(sdk_module, "_SSE_PING_INTERVAL", 0.05)
    monkeypatch.setattr(exchange, "_SSE_PING_INTERVAL", 0.05)

    async def act(app: Any, slow: _Slow, gone: asyncio.Event) -> list[dict[str, Any]]:
        sent: list[dict[str, Any]] = []
        posting = asyncio.create_task(_post(app, _headers(name="waits"), _call("waits", {}), sent=sent))
        await asyncio.wait_for(slow.started.wait(), 10)
        async with asyncio.timeout(10):
            while sum(m.get("body") == PING for m in sent) < 2:  # silent past two intervals
                await asyncio.sleep(0.01)
        slow.release.set()
        return await asyncio.wait_for(posting, 10)

    sdk, _, ours, _ = _race(act)
    assert sdk_entry.served == 1
    for sent in (sdk, ours):
        assert dict(sent[0]["headers"])[b"content-type"] == b"text/event-stream"
        bodies = [m["body"] for m in sent[1:]]
        assert len(bodies[:-1]) >= 2, "pinged each interval"
        assert set(bodies[:-1]) == {PING}, bodies
    # How many pings fit the wait is timing; the stream's start and its last frame are the same.
    assert ours[0] == sdk[0]
    assert ours[-1] == sdk[-1]
    assert json.loads(ours[-1]["body"].decode().split("data: ", 1)[1])["result"]["content"][0]["text"] == "released"


def test_a_post_of_the_handshake_era_or_without_a_valid_token_is_the_sdks(sdk_entry: _SdkEntry) -> None:
    async def go() -> list[tuple[list[dict[str, Any]], list[dict[str, Any]]]]:
        async with _apps(_Slow()) as (sdk_app, ours):
            cases = [
                (_headers(name="echo", authorization="Bearer wrong"), _call("echo", {"text": "x"})),
                (_headers(name="echo", **{"mcp-protocol-version": "2025-11-25"}), _call("echo", {"text": "x"})),
                (_headers(name="echo", **{"mcp-protocol-version": "2099-01-01"}), _call("echo", {"text": "x"})),
            ]
            return [(await _post(sdk_app, h, b), await _post(ours, h, b)) for h, b in cases]

    answers = asyncio.run(go())
    for sdk, ours in answers:
        assert ours == sdk
    # The refused token is the SDK's 401 before any entry; the handshake-era call is its legacy
    # transport's; the unknown revision its modern entry's refusal, for both apps.
    assert sdk_entry.served == 2
    refused, handshake, unknown = (sdk for sdk, _ in answers)
    assert refused[0]["status"] == 401
    assert handshake[0]["status"] == 200
    assert unknown[0]["status"] == 400
