"""What our two per-host admin servers share (sdk1_server.py on the Python SDK 1.x, fastmcp_server.py
on fastmcp 4.x): the hosts' files, the record of the calls received, the command line and the ready line.

Each server runs in its own virtualenv (``make upstreams``: var/upstreams/py1, var/upstreams/py2)
as a script, which puts this folder first on ``sys.path``; so this module imports nothing but the
standard library and uvicorn, which both SDKs bring.

The servers stand for an admin tool people run against their machines: ``read_file(host, path)``
and ``write_file(host, path, content)`` act on ``FILES/<host>/<path>`` (``--files FILES``), so a
test sees a write land on disk, per host.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

import uvicorn

MCP_PATH = "/mcp"
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_HOST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")

SERVER_INSTRUCTIONS = "Read and write files on the machines you administer, one host at a time."
HOST_HELP = "The machine to act on, by name (e.g. web01)."
PATH_HELP = "An absolute path on that machine, e.g. /etc/motd."
CONTENT_HELP = "The whole new content of the file (UTF-8 text)."
SECONDS_HELP = "How long to wait, in seconds (at most 600)."
SLOW_STEPS = 4
# The tools' annotations, as both SDKs take them (the wire's names).
READ_FILE = {"title": "Read a file", "readOnlyHint": True}
WRITE_FILE = {"title": "Write a file", "readOnlyHint": False, "destructiveHint": True}
SLOW = {"title": "Wait", "readOnlyHint": True}


class HostFiles:
    """The files of every host, each under ``root/<host>/``: a path may not leave its host's folder."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    def resolve(self, host: str, path: str) -> Path:
        if not _HOST_NAME.fullmatch(host) or host.strip(".") == "":
            raise ValueError(f"{host!r} is not a host name")
        if not path.startswith("/"):
            raise ValueError(f"{path!r} is not an absolute path")
        base = self.root / host
        target = (base / path.lstrip("/")).resolve()
        if target != base and base not in target.parents:
            raise ValueError(f"{path!r} leaves the host's file system")
        return target

    def read(self, host: str, path: str) -> str:
        target = self.resolve(host, path)
        if not target.is_file():
            raise FileNotFoundError(f"{host}:{path}: no such file")
        return target.read_text(encoding="utf-8")

    def write(self, host: str, path: str, content: str) -> str:
        target = self.resolve(host, path)
        target.parent.mkdir(parents=True, exist_ok=True)
        data = content.encode("utf-8")
        target.write_bytes(data)
        return f"wrote {len(data)} bytes to {host}:{path}"


async def wait_reporting(seconds: float, report: Callable[[float, float, str], Awaitable[None]]) -> str:
    """Wait ``seconds`` in ``SLOW_STEPS`` steps, reporting progress after each."""
    if not 0 <= seconds <= 600:
        raise ValueError("seconds must be between 0 and 600")
    for step in range(1, SLOW_STEPS + 1):
        await asyncio.sleep(seconds / SLOW_STEPS)
        await report(step, SLOW_STEPS, f"step {step} of {SLOW_STEPS}")
    return "done"


class CallRecord:
    """ASGI middleware: one JSON line per ``tools/call`` POSTed, appended to ``path``, before the SDK sees it.

    Taken from the request itself, so a call the server then refuses (an unknown tool, bad
    arguments, an unknown session) still counts as received. Each line holds ``tool``,
    ``arguments``, ``authorization`` (the request's header), ``session`` (its ``Mcp-Session-Id``),
    ``protocol_version`` (its ``Mcp-Protocol-Version``) and ``progress_asked``.
    """

    def __init__(self, app: ASGIApp, path: Path) -> None:
        self.app, self.path = app, path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        received: list[Message] = []
        body = b""
        while True:
            message = await receive()
            received.append(message)
            body += message.get("body", b"")
            if message["type"] != "http.request" or not message.get("more_body"):
                break
        self._record(body, {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]})
        replay = iter(received)

        async def receive_again() -> Message:
            return next(replay, None) or await receive()

        await self.app(scope, receive_again, send)

    def _record(self, body: bytes, headers: dict[str, str]) -> None:
        try:
            decoded = json.loads(body)
        except ValueError:
            return  # the SDK answers it with a parse error; nothing was called
        lines = []
        for message in decoded if isinstance(decoded, list) else [decoded]:
            if not isinstance(message, dict) or message.get("method") != "tools/call":
                continue
            params = message.get("params")
            params = params if isinstance(params, dict) else {}
            meta = params.get("_meta")
            call = {
                "tool": params.get("name"),
                "arguments": params.get("arguments"),
                "authorization": headers.get("authorization"),
                "session": headers.get("mcp-session-id"),
                "protocol_version": headers.get("mcp-protocol-version"),
                "progress_asked": isinstance(meta, dict) and meta.get("progressToken") is not None,
            }
            lines.append(json.dumps(call) + "\n")
        if lines:
            with self.path.open("a", encoding="utf-8") as out:
                out.write("".join(lines))


def parse_args(prog: str, description: str) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("--files", type=Path, required=True, help="the hosts' files: FILES/<host>/<path>")
    state = p.add_mutually_exclusive_group()
    state.add_argument(
        "--stateful", dest="stateless", action="store_false", help="keep MCP sessions in memory (the default)"
    )
    state.add_argument("--stateless", dest="stateless", action="store_true", help="no sessions: each request alone")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=0, help="port (default 0: a free one, named in the ready line)")
    p.add_argument("--record", type=Path, help="append one JSON line per tools/call received here")
    p.add_argument(
        "--token-file", type=Path, help="require `Authorization: Bearer <the file's content>` on every request (401)"
    )
    return p.parse_args()


class BearerGate:
    """ASGI middleware: 401 unless the request carries ``Authorization: Bearer <token>``."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app, self.expected = app, f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != self.expected:
            body = b'{"error": "invalid_token", "error_description": "a valid bearer token is required"}'
            headers = [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"www-authenticate", b'Bearer error="invalid_token"'),
            ]
            await send({"type": "http.response.start", "status": 401, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)


def serve(app: ASGIApp, args: argparse.Namespace, *, name: str) -> None:
    """Serve ``app`` under uvicorn as ``args`` say; print ``<name> ready on http://HOST:PORT/mcp`` once it listens."""
    if args.record is not None:
        app = CallRecord(app, args.record)
    if args.token_file is not None:
        app = BearerGate(app, args.token_file.read_text(encoding="utf-8").strip())
    host = args.host

    class Server(uvicorn.Server):
        async def startup(self, sockets: list[Any] | None = None) -> None:
            await super().startup(sockets)
            if self.started:
                bound = self.servers[0].sockets[0].getsockname()[1] if self.servers else self.config.port
                print(f"{name} ready on http://{host}:{bound}{MCP_PATH}", flush=True)

    Server(uvicorn.Config(app, host=host, port=args.port, log_level="warning", lifespan="on")).run()
