"""A tiny scripted HTTP server on 127.0.0.1 for what the simulator cannot show:
the exact form and headers the client sends, and a token value the test knows."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

TOKEN = "tok-ABCDEF-0123456789-secret"
DROP = "<drop the connection>"


@dataclass
class Seen:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes


@dataclass
class LocalZvm:
    """Answers ``routes[(METHOD, path)]`` = (status, body); the token endpoint by default."""

    prefix: str = "/site-x"
    routes: dict[tuple[str, str], tuple[int, Any]] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)
    token_status: int = 200
    token_body: Any = field(default_factory=lambda: {"access_token": TOKEN, "expires_in": 300})
    url: str = ""

    def requests_to(self, suffix: str) -> list[Seen]:
        return [s for s in self.seen if s.path == self.prefix + suffix]

    def answer(self, method: str, path: str) -> tuple[int, Any]:
        if method == "POST" and path == self.prefix + "/auth/realms/zerto/protocol/openid-connect/token":
            return self.token_status, self.token_body
        return self.routes.get((method, path.removeprefix(self.prefix)), (404, {"Message": "no such path"}))


def _handler(zvm: LocalZvm) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            parts = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            zvm.seen.append(
                Seen(self.command, parts.path, parse_qs(parts.query), dict(self.headers), self.rfile.read(length))
            )
            status, body = zvm.answer(self.command, parts.path)
            if body == DROP:
                self.close_connection = True  # hang up without a word
                return
            raw = body if isinstance(body, bytes) else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        do_GET = do_POST = do_DELETE = _serve

        def log_message(self, *args: object) -> None:
            pass

    return Handler


def serve() -> Iterator[LocalZvm]:
    zvm = LocalZvm()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(zvm))
    zvm.url = f"http://127.0.0.1:{server.server_address[1]}{zvm.prefix}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield zvm
    finally:
        server.shutdown()
        server.server_close()
