"""A webhook receiver for notification tests: a threading HTTP server on 127.0.0.1 that records
every POST, answering with the status the test sets, and the Apprise ``json://`` URL pointing at it."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# A password that must appear nowhere but in the URL and the Authorization header it becomes.
PASSWORD = "Hunter2-notify-s3cret"


@dataclass
class Post:
    path: str
    user: str
    password: str
    payload: dict[str, Any]


@dataclass
class Receiver:
    port: int
    status: int = 200
    posts: list[Post] = field(default_factory=list)

    def url(self, path: str = "/hook", user: str = "rewind", password: str = PASSWORD) -> str:
        return f"json://{user}:{password}@127.0.0.1:{self.port}{path}"


def _handler(receiver: Receiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            auth = self.headers.get("Authorization") or ""
            user, _, password = (
                base64.b64decode(auth[6:]).decode().partition(":") if auth.startswith("Basic ") else ("", "", "")
            )
            receiver.posts.append(Post(self.path, user, password, json.loads(raw or b"{}")))
            self.send_response(receiver.status)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, format: str, *args: Any) -> None:
            return  # quiet: the test reads ``posts``

    return Handler


@contextmanager
def running_receiver() -> Iterator[Receiver]:
    receiver = Receiver(port=0)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(receiver))
    receiver.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True, name="webhook-receiver")
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
