"""The control session survives a kept-alive connection the server closed as a call went out."""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from zvmsim.control_client import control_session
from zvmsim.tls import ensure_certs


class _ClosesItsFirstConnection:
    """A TLS server whose first connection answers one request, then takes the next and closes
    without answering (as a server does whose idle timeout fell just as the call came); every
    later connection answers what it reads."""

    def __init__(self, cert_dir: Path) -> None:
        certs = ensure_certs(cert_dir, ["127.0.0.1"])
        self.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.tls.load_cert_chain(certs.cert, certs.key)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"https://127.0.0.1:{self.listener.getsockname()[1]}"
        self.requests: list[str] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        for n in range(2):
            raw, _ = self.listener.accept()
            with self.tls.wrap_socket(raw, server_side=True) as conn:
                for answered in range(2 if n == 0 else 1):
                    self._read_request(conn)
                    if n == 0 and answered == 1:
                        break  # closed without an answer
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")

    def _read_request(self, conn: ssl.SSLSocket) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            data += conn.recv(4096)
        head, _, body = data.partition(b"\r\n\r\n")
        length = next(
            (int(h.split(b":")[1]) for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")), 0
        )
        while len(body) < length:
            body += conn.recv(4096)
        self.requests.append(head.split(b"\r\n")[0].decode())


@pytest.fixture
def server(tmp_path: Path) -> Iterator[_ClosesItsFirstConnection]:
    srv = _ClosesItsFirstConnection(tmp_path)
    yield srv
    srv.listener.close()


def test_a_get_on_a_connection_closed_under_it_is_sent_again(server: _ClosesItsFirstConnection) -> None:
    http = control_session()
    assert http.get(f"{server.url}/_sim/state", timeout=10).json() == {}
    assert http.get(f"{server.url}/_sim/sites/site-a/flrs", timeout=10).json() == {}
    # The second GET went out twice: on the closed connection, then on a new one.
    flrs = "GET /_sim/sites/site-a/flrs HTTP/1.1"
    assert server.requests == ["GET /_sim/state HTTP/1.1", flrs, flrs]


def test_a_post_is_never_sent_twice(server: _ClosesItsFirstConnection) -> None:
    http = control_session()
    http.get(f"{server.url}/_sim/state", timeout=10)
    with pytest.raises(requests.ConnectionError, match="without response"):
        http.post(f"{server.url}/_sim/reset", timeout=10)
    assert server.requests == ["GET /_sim/state HTTP/1.1", "POST /_sim/reset HTTP/1.1"]
