"""A small "guest shell" MCP server: an upstream for gateway tests that changes files inside the
simulator's guests, the way an ssh or WinRM MCP server changes files inside real VMs.

It edits the guests through the simulator's control API (``/_sim/vms/{vm}/files``), so a test
can break a config file through it and then recover the file from a journal checkpoint.

Run it over stdio or as streamable HTTP (stateless, at ``/mcp``)::

    python -m tests.gateway.guestshell --stdio --sim-url URL --ca-bundle PATH [--record FILE]
    python -m tests.gateway.guestshell --http --port 0 --sim-url URL --ca-bundle PATH
                                       [--host 127.0.0.1] [--token T] [--record FILE] [--stateful]

Over HTTP it prints ``guestshell ready on http://127.0.0.1:PORT/mcp`` once it listens (``--port 0``
picks a free port). ``--token T`` makes every HTTP request need ``Authorization: Bearer T`` (401
otherwise). ``--stateful`` speaks only the handshake era and keeps MCP sessions in memory, as most
servers do today: a restart forgets them and answers the old session id with 404 "Session not found";
it also exports ``consult``, which asks the client on its call's own stream (a ping, a log line, an
elicitation), as only that era allows. ``--record FILE`` appends one JSON line per tool call it receives:
``{"tool", "arguments", "authorization"}`` (the request's Authorization header, or null over
stdio), so a test can tell which calls reached this upstream and with which credentials.

The options may come from the environment instead: ``GUESTSHELL_SIM_URL``, ``GUESTSHELL_CA_BUNDLE``,
``GUESTSHELL_TOKEN``, ``GUESTSHELL_RECORD``.

Tools: ``exec`` (a tiny shell: ``cat``, ``rm``, ``echo TEXT > PATH``, ``echo TEXT >> PATH``,
``sed -i 's/OLD/NEW/[g]' PATH``), ``write_file`` and ``read_file`` (``encoding``: utf-8 text or base64),
``append_line`` (its VM argument is ``computer_name``) and ``slow`` (sleeps, reporting progress each
second). With ``--faulty`` three more misbehave on purpose, for restore tests: ``write_half`` writes half
the bytes and fails, ``write_until_full`` does so only for a file whose name starts with ``full-`` (a
folder whose second file fills the disk), ``read_stale`` gives back other bytes than the file holds, and
``write_stalling`` hangs for a file whose name starts with ``stall-before-`` (nothing written) or
``stall-after-`` (written whole first), as a guest whose session freezes mid-write (a test kills the
worker meanwhile).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import json
import os
import shlex
import sys
import threading
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import quote

import requests
import uvicorn
from mcp.server import MCPServer
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp_types import EmptyResult, PingRequest, ToolAnnotations
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, Field

READY = "guestshell ready on "
# How long write_stalling hangs: far beyond any test, which kills the worker waiting on it.
STALL_S = 3600.0
MCP_PATH = "/mcp"

Host = Annotated[
    str,
    Field(description="The VM to act on, by name as the hypervisor knows it (e.g. web01); user@host is accepted."),
]
GuestPath = Annotated[
    str,
    Field(description="An absolute path inside the guest: /etc/nginx/nginx.conf or C:\\inetpub\\web.config."),
]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class Guests:
    """The simulator's guests, through its control API (blocking calls, made on worker threads)."""

    def __init__(self, sim_url: str, ca_bundle: str | None) -> None:
        self.base = sim_url.rstrip("/")
        self.http = requests.Session()
        self.http.trust_env = False
        self.http.verify = ca_bundle if ca_bundle else True

    def _url(self, host: str) -> str:
        vm = host.rpartition("@")[2].strip()
        if not vm:
            raise ToolError("no host given")
        return f"{self.base}/_sim/vms/{quote(vm, safe='')}/files"

    def _fail(self, resp: requests.Response, host: str, path: str) -> ToolError:
        try:
            detail = resp.json().get("Message") or resp.text
        except ValueError:
            detail = resp.text
        if resp.status_code == 404:
            return ToolError(f"{host}:{path}: No such file or host ({detail})")
        return ToolError(f"{host}:{path}: {detail} (status {resp.status_code})")

    def read(self, host: str, path: str) -> bytes:
        resp = self.http.get(self._url(host), params={"path": path}, timeout=30)
        if resp.status_code != 200:
            raise self._fail(resp, host, path)
        return resp.content

    def read_text(self, host: str, path: str, *, missing_ok: bool = False) -> str:
        try:
            data = self.read(host, path)
        except ToolError:
            if missing_ok:
                return ""
            raise
        try:
            return data.decode()
        except UnicodeDecodeError as exc:
            raise ToolError(f"{host}:{path} is not UTF-8 text") from exc

    def write(self, host: str, path: str, text: str) -> int:
        resp = self.http.put(self._url(host), json={"path": path, "text": text}, timeout=30)
        if resp.status_code != 200:
            raise self._fail(resp, host, path)
        return int(resp.json()["size"])

    def write_bytes(self, host: str, path: str, data: bytes) -> int:
        body = {"path": path, "content_b64": base64.b64encode(data).decode("ascii")}
        resp = self.http.put(self._url(host), json=body, timeout=30)
        if resp.status_code != 200:
            raise self._fail(resp, host, path)
        return int(resp.json()["size"])

    def delete(self, host: str, path: str) -> None:
        resp = self.http.delete(self._url(host), params={"path": path}, timeout=30)
        if resp.status_code != 200:
            raise self._fail(resp, host, path)


Encoding = Annotated[
    Literal["utf-8", "base64"],
    Field(description="How content travels: utf-8 text (the default) or base64 (any bytes)."),
]


def _decode(content: str, encoding: str) -> bytes:
    if encoding != "base64":
        return content.encode()
    try:
        return base64.b64decode(content, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ToolError(f"content is not valid base64: {exc}") from exc


class Recorder:
    """One JSON line per tool call received, appended to ``path`` (nothing without a path)."""

    def __init__(self, path: str | None) -> None:
        self.path = Path(path) if path else None
        self._lock = threading.Lock()

    def record(self, tool: Any, arguments: Any, authorization: str | None, progress_asked: bool = False) -> None:
        if self.path is None:
            return
        line = json.dumps(
            {"tool": tool, "arguments": arguments, "authorization": authorization, "progress_asked": progress_asked},
            default=str,
        )
        with self._lock, self.path.open("a", encoding="utf-8") as out:
            out.write(line + "\n")

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        """Server middleware: sees every tools/call before validation, so even a call whose
        arguments the tool refuses counts as received."""
        if ctx.method == "tools/call" and ctx.request_id is not None:
            params = ctx.params or {}
            headers = getattr(ctx.request, "headers", None)  # a Starlette request over HTTP; None over stdio
            meta = params.get("_meta")
            self.record(
                params.get("name"),
                params.get("arguments"),
                headers.get("authorization") if headers else None,
                progress_asked=isinstance(meta, dict) and meta.get("progressToken") is not None,
            )
        return await call_next(ctx)


def _lex(command: str) -> list[str]:
    """Shell words; quotes group, backslashes stay literal (Windows paths), > and >> stand alone."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars="<>|;&")
    lexer.whitespace_split = True
    lexer.escape = ""
    try:
        return list(lexer)
    except ValueError as exc:
        raise ToolError(f"cannot parse the command: {exc}") from exc


def _sed_expression(expr: str) -> tuple[str, str, bool]:
    """'s/OLD/NEW/' or 's/OLD/NEW/g' (any delimiter, backslash escapes it) -> (old, new, global)."""
    if len(expr) < 2 or expr[0] != "s":
        raise ToolError(f"sed: only s/OLD/NEW/[g] is supported, not {expr!r}")
    delim = expr[1]
    parts: list[str] = [""]
    i = 2
    while i < len(expr):
        ch = expr[i]
        if ch == "\\" and i + 1 < len(expr) and expr[i + 1] == delim:
            parts[-1] += delim
            i += 2
            continue
        if ch == delim:
            parts.append("")
        else:
            parts[-1] += ch
        i += 1
    if len(parts) != 3 or parts[2] not in ("", "g") or not parts[0]:
        raise ToolError(f"sed: bad expression {expr!r}; use s/OLD/NEW/ or s/OLD/NEW/g")
    return parts[0], parts[1], parts[2] == "g"


class Shell:
    """The commands ``exec`` understands."""

    def __init__(self, guests: Guests) -> None:
        self.guests = guests

    def run(self, host: str, command: str) -> str:
        words = _lex(command)
        if not words:
            raise ToolError("empty command")
        name, args = words[0], words[1:]
        if name == "cat" and len(args) == 1:
            return self.guests.read_text(host, args[0])
        if name == "rm":
            paths = [a for a in args if a not in ("-f",)]
            if len(paths) != 1:
                raise ToolError("usage: rm [-f] PATH")
            try:
                self.guests.delete(host, paths[0])
            except ToolError:
                if "-f" not in args:
                    raise
            return ""
        if name == "echo":
            return self._echo(host, args)
        if name == "sed":
            return self._sed(host, args)
        raise ToolError(f"{name}: command not found (this shell knows cat, rm, echo > / >>, sed -i 's/a/b/')")

    def _echo(self, host: str, args: list[str]) -> str:
        newline = "\n"
        if args[:1] == ["-n"]:
            newline, args = "", args[1:]
        redirect = next((i for i, a in enumerate(args) if a in (">", ">>")), None)
        if redirect is None:
            return " ".join(args) + newline
        if redirect != len(args) - 2:
            raise ToolError("usage: echo TEXT > PATH or echo TEXT >> PATH")
        text = " ".join(args[:redirect]) + newline
        path = args[-1]
        if args[redirect] == ">>":
            text = self.guests.read_text(host, path, missing_ok=True) + text
        self.guests.write(host, path, text)
        return ""

    def _sed(self, host: str, args: list[str]) -> str:
        rest = [a for a in args if a != "-e"]
        if not rest or rest[0] != "-i" or len(rest) != 3:
            raise ToolError("usage: sed -i 's/OLD/NEW/[g]' PATH")
        old, new, every = _sed_expression(rest[1])
        path = rest[2]
        lines = self.guests.read_text(host, path).splitlines(keepends=True)
        # sed works line by line: without g, the first match on each line.
        changed = [line.replace(old, new) if every else line.replace(old, new, 1) for line in lines]
        self.guests.write(host, path, "".join(changed))
        return ""


def build_server(guests: Guests, recorder: Recorder, *, faulty: bool = False, stateful: bool = False) -> MCPServer:
    server = MCPServer(
        "guestshell",
        instructions="Change and read files inside lab VMs (a test upstream for zerto-rewind).",
        middleware=[recorder],
    )
    shell = Shell(guests)

    @server.tool(
        name="exec",
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, title="Run a shell command"),
    )
    def exec_(
        host: Host,
        command: Annotated[
            str,
            Field(
                description="A command: cat PATH, rm PATH, echo TEXT > PATH, echo TEXT >> PATH, "
                "or sed -i 's/OLD/NEW/[g]' PATH (literal text, not regular expressions)."
            ),
        ],
    ) -> str:
        """Run a shell command on a VM and return its output (file edits return nothing)."""
        return shell.run(host, command)

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, title="Write a file"))
    def write_file(
        host: Host,
        path: GuestPath,
        content: Annotated[str, Field(description="The whole new content of the file (UTF-8 text, or base64).")],
        encoding: Encoding = "utf-8",
    ) -> str:
        """Create or replace a file on a VM."""
        size = guests.write_bytes(host, path, _decode(content, encoding))
        return f"wrote {size} bytes to {host}:{path}"

    @server.tool(annotations=ToolAnnotations(read_only_hint=True, title="Read a file"))
    def read_file(host: Host, path: GuestPath, encoding: Encoding = "utf-8") -> str:
        """Return the content of a file on a VM (as text, or base64)."""
        if encoding == "base64":
            return base64.b64encode(guests.read(host, path)).decode("ascii")
        return guests.read_text(host, path)

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, title="Append a line"))
    def append_line(
        computer_name: Annotated[str, Field(description="The VM to act on, by name (e.g. web01).")],
        path: GuestPath,
        line: Annotated[str, Field(description="The line to add at the end of the file (no newline needed).")],
    ) -> str:
        """Append one line to a file on a computer (the file is created when missing)."""
        text = guests.read_text(computer_name, path, missing_ok=True)
        if text and not text.endswith("\n"):
            text += "\n"
        guests.write(computer_name, path, text + line.rstrip("\n") + "\n")
        return f"appended to {computer_name}:{path}"

    @server.tool(annotations=ToolAnnotations(read_only_hint=True, title="Wait"))
    async def slow(
        seconds: Annotated[float, Field(ge=0, le=600, description="How long to wait, in seconds.")],
        ctx: Context,
    ) -> str:
        """Wait this long, reporting progress every second, then answer "done"."""
        waited = 0.0
        while waited < seconds:
            step = min(1.0, seconds - waited)
            await asyncio.sleep(step)
            waited += step
            await ctx.report_progress(waited, seconds, f"{waited:g} of {seconds:g} s")
        return "done"

    if faulty:
        _add_faulty_tools(server, guests)
    if stateful:
        _add_consult(server)
    return server


class _Verdict(BaseModel):
    go_on: bool


def _add_consult(server: MCPServer) -> None:
    """``consult`` (``--stateful``): requests to the client on the call's own stream, which only
    the handshake era allows."""

    @server.tool(annotations=ToolAnnotations(read_only_hint=True, title="Consult the client"))
    async def consult(question: str, ctx: Context) -> str:
        """Ask the client on this call's stream: a ping, a log line, then the question as an
        elicitation; answer what each request got."""
        said = []
        related = ServerMessageMetadata(related_request_id=ctx.request_id)
        try:
            await ctx.session.send_request(PingRequest(), EmptyResult, metadata=related)
            said.append("ping answered")
        except MCPError as exc:
            said.append(f"ping refused: {exc}")
        await ctx.info(f"consulting on: {question}")
        try:
            verdict = await ctx.elicit(question, schema=_Verdict)
            said.append(f"elicitation {verdict.action}")
        except MCPError as exc:
            said.append(f"elicitation refused: {exc}")
        return "; ".join(said)


def _add_faulty_tools(server: MCPServer, guests: Guests) -> None:
    """Tools that misbehave on purpose (``--faulty``), for the tests of restores in place."""

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, title="Write half a file"))
    def write_half(host: Host, path: GuestPath, content: str, encoding: Encoding = "utf-8") -> str:
        """A writer that breaks half-way: it writes the first half of the bytes, then fails."""
        data = _decode(content, encoding)
        guests.write_bytes(host, path, data[: len(data) // 2])
        raise ToolError(f"{host}:{path}: No space left on device after {len(data) // 2} bytes")

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, title="Write till full"))
    def write_until_full(host: Host, path: GuestPath, content: str, encoding: Encoding = "utf-8") -> str:
        """A writer that writes files whole, but breaks half-way through one whose name starts with full-."""
        if path.replace("\\", "/").rsplit("/", 1)[-1].startswith("full-"):
            return write_half(host, path, content, encoding)
        size = guests.write_bytes(host, path, _decode(content, encoding))
        return f"wrote {size} bytes to {host}:{path}"

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, title="Write, or hang"))
    async def write_stalling(host: Host, path: GuestPath, content: str, encoding: Encoding = "utf-8") -> str:
        """A writer that hangs for a file whose name starts with stall-before- (before writing a byte)
        or stall-after- (after writing it whole); other files are written whole."""
        name = path.replace("\\", "/").rsplit("/", 1)[-1]
        if name.startswith("stall-before-"):
            await asyncio.sleep(STALL_S)
            raise ToolError(f"{host}:{path}: the session froze; nothing was written")  # never writes late
        size = await asyncio.to_thread(guests.write_bytes, host, path, _decode(content, encoding))
        if name.startswith("stall-after-"):
            await asyncio.sleep(STALL_S)
        return f"wrote {size} bytes to {host}:{path}"

    @server.tool(annotations=ToolAnnotations(read_only_hint=True, title="Read a file, wrongly"))
    def read_stale(host: Host, path: GuestPath, encoding: Encoding = "utf-8") -> str:
        """A reader that gives back other bytes than the file holds (a cache gone stale)."""
        data = guests.read(host, path) + b"# stale\n"
        return base64.b64encode(data).decode("ascii") if encoding == "base64" else data.decode("utf-8", "replace")


class BearerGate:
    """ASGI middleware: 401 unless the request carries ``Authorization: Bearer <token>``."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]], token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != self.expected:
            body = b'{"error": "invalid_token", "error_description": "a valid bearer token is required"}'
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                        (b"www-authenticate", b'Bearer error="invalid_token"'),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)


class HandshakeOnly:
    """ASGI middleware: a server of the handshake era only, as most servers are today.

    A request of a later revision (the client's ``server/discover`` probe) gets the JSON-RPC
    "Method not found" such a server answers, so a client falls back to ``initialize`` and a
    session, which this server keeps in memory only.
    """

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        version = dict(scope.get("headers") or []).get(b"mcp-protocol-version", b"").decode()
        if scope["type"] == "http" and version in MODERN_PROTOCOL_VERSIONS:
            body = b'{"jsonrpc": "2.0", "id": null, "error": {"code": -32601, "message": "Method not found"}}'
            headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
            await send({"type": "http.response.start", "status": 400, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)


class _Server(uvicorn.Server):
    """Prints the ready line, with the port really bound, once the socket listens."""

    async def startup(self, sockets: list | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            port = self.servers[0].sockets[0].getsockname()[1] if self.servers else self.config.port
            print(f"{READY}http://{self.config.host}:{port}{MCP_PATH}", flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    env = os.environ.get
    p = argparse.ArgumentParser(prog="python -m tests.gateway.guestshell", description=__doc__.split("\n\n")[0])
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--stdio", action="store_true", help="serve MCP over stdin/stdout")
    mode.add_argument("--http", action="store_true", help="serve streamable HTTP (stateless) at /mcp")
    p.add_argument(
        "--stateful",
        action="store_true",
        help="with --http, speak only the handshake era and keep sessions in memory, as most servers do: "
        "a restart forgets them",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on with --http (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=0, help="port with --http (default 0: a free one, in the ready line)")
    p.add_argument("--sim-url", default=env("GUESTSHELL_SIM_URL"), help="the simulator's root URL (GUESTSHELL_SIM_URL)")
    p.add_argument(
        "--ca-bundle", default=env("GUESTSHELL_CA_BUNDLE"), help="the simulator's CA bundle (GUESTSHELL_CA_BUNDLE)"
    )
    p.add_argument(
        "--token", default=env("GUESTSHELL_TOKEN"), help="with --http, require this bearer token (GUESTSHELL_TOKEN)"
    )
    p.add_argument(
        "--record", default=env("GUESTSHELL_RECORD"), help="append one JSON line per tool call here (GUESTSHELL_RECORD)"
    )
    p.add_argument(
        "--faulty",
        action="store_true",
        help="also export write_half, write_until_full, read_stale and write_stalling, which misbehave on purpose",
    )
    args = p.parse_args(argv)
    if not args.sim_url:
        p.error("--sim-url (or GUESTSHELL_SIM_URL) is required")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    guests, recorder = Guests(args.sim_url, args.ca_bundle), Recorder(args.record)
    server = build_server(guests, recorder, faulty=args.faulty, stateful=args.stateful)
    if args.stdio:
        server.run("stdio")
        return 0
    app: Any = server.streamable_http_app(
        streamable_http_path=MCP_PATH, stateless_http=not args.stateful, host=args.host
    )
    if args.stateful:
        app = HandshakeOnly(app)
    if args.token:
        app = BearerGate(app, args.token)
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level="warning", lifespan="on")
    _Server(config).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
