"""The only code that touches the network: one ``send`` with timeouts, TLS and logging.

It also turns every failure into a typed ``ZvmError`` with a plain-words reason.
Nothing here knows about tokens beyond the header it is handed, and nothing logs a
header, a body or a query string (download links may carry one-time secrets there).
"""

from __future__ import annotations

import http.client
import json
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any
from urllib.parse import urlsplit

import requests
from requests.adapters import HTTPAdapter
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.util.ssl_ import create_urllib3_context
from urllib3.util.wait import wait_for_read

from .connection import ZvmConnection
from .counting import RequestCounter, answered, no_answer
from .errors import (
    ZvmError,
    ZvmNotFoundError,
    ZvmRejectedError,
    ZvmTlsError,
    ZvmTransientError,
)
from .pacing import LATE_S, LOCAL_PACER, Pacer

logger = logging.getLogger("rewind.zvm")

TRIGGERED_BY = "zerto-rewind"
_MAX_ERROR_BODY = 64 * 1024
_MAX_MESSAGE = 300


# The request this thread is about to send, checked once its connection is ready (``_WireCheck``).
_on_wire = threading.local()


def _connected_and_on_time(conn: Any) -> None:
    """Connect now if the pooled connection is closed, then give the request's pacing its last word: the slot holds
    at the moment the bytes leave, since a TLS handshake on a busy host can outlast the pacer's slack."""
    if conn.is_closed:
        conn.connect()  # as urllib3 does for HTTPS: connect early so TLS errors surface here
    check: _WireCheck | None = getattr(_on_wire, "check", None)
    if check is None:
        return
    _on_wire.check = None  # this request's only: a redirect is not paced again
    for _ in range(RESERVE_TRIES):
        if not check.late_then_waited():
            return
        if _closed_by_peer(conn):  # the ZVM closed it while we waited for the new slot
            conn.close()
            conn.connect()


def _closed_by_peer(conn: Any) -> bool:
    """Whether a connection that has sent nothing yet was closed by the ZVM. urllib3's ``is_connected`` takes a TLS
    1.3 connection that just got its session tickets for closed (and reconnecting made the request late again);
    reading without blocking tells them apart: the tickets leave nothing to read."""
    sock = conn.sock
    if sock is None:
        return True
    if not wait_for_read(sock, timeout=0.0):
        return False
    if not isinstance(sock, ssl.SSLSocket):
        return True  # bytes or an end before any request was sent: not a connection to send on
    timeout = sock.gettimeout()
    sock.settimeout(0.0)
    try:
        sock.recv(1)  # an end (b"") or bytes nobody asked for: not a connection to send on either way
    except ssl.SSLWantReadError:
        return False  # only TLS records (the tickets), read now: still open
    except OSError:
        pass  # a reset or a broken TLS session
    finally:
        sock.settimeout(timeout)
    return True


class _QuietHTTPSConnectionPool(HTTPSConnectionPool):
    """urllib3's HTTPS pool paced at the wire and without the InsecureRequestWarning: unverified TLS is a site's
    configured choice (self-signed appliances), and silencing it with ``warnings.filterwarnings`` would be
    process-wide and not thread-safe."""

    def _validate_conn(self, conn: Any) -> None:
        # urllib3's only hook between connecting and sending ("called right before a request is made, after
        # the socket is created"), private in name; the HTTPS pool's own step, the warning above, is skipped.
        HTTPConnectionPool._validate_conn(self, conn)  # noqa: SLF001
        _connected_and_on_time(conn)


class _PacedHTTPConnectionPool(HTTPConnectionPool):
    def _validate_conn(self, conn: Any) -> None:
        super()._validate_conn(conn)
        _connected_and_on_time(conn)


class _QuietAdapter(HTTPAdapter):
    def __init__(self, *, ssl_context: ssl.SSLContext | None = None, **kwargs: Any) -> None:
        self._ssl_context = ssl_context  # read by init_poolmanager, which super().__init__ calls
        super().__init__(**kwargs)

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        if self._ssl_context is not None:
            kwargs["ssl_context"] = self._ssl_context
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {
            "http": _PacedHTTPConnectionPool,
            "https": _QuietHTTPSConnectionPool,
        }


def unverified_tls_context() -> ssl.SSLContext:
    """The TLS context of every unverified connection of a session, built once: urllib3 would build one per new
    connection and load the system's CA store into it, which unverified TLS never reads (measured: see the
    benchmarks page)."""
    context = create_urllib3_context(cert_reqs=ssl.CERT_NONE)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def build_session(verify: bool | str = False) -> requests.Session:
    """A session for one ZVM. ``trust_env`` is off so no env proxy, REQUESTS_CA_BUNDLE
    or ~/.netrc can silently change where credentials go or override our headers.
    ``verify`` is the ``verify=`` its requests will carry (``ZvmConnection.verify``)."""
    session = requests.Session()
    session.trust_env = False
    context = unverified_tls_context() if verify is False else None
    adapter = _QuietAdapter(ssl_context=context, pool_connections=2, pool_maxsize=16)
    session.mount("https://", adapter)
    session.mount("http://", adapter)
    session.headers["User-Agent"] = TRIGGERED_BY
    return session


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """exc and everything it wraps: requests/urllib3 nest the real reason several levels deep."""
    seen: set[int] = set()
    stack: list[BaseException] = [exc]
    while stack and len(seen) < 32:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        nested = [current.__cause__, current.__context__, getattr(current, "reason", None)]
        nested += [a for a in getattr(current, "args", ()) if isinstance(a, BaseException)]
        stack.extend(n for n in nested if isinstance(n, BaseException))


def _connect_reason(exc: BaseException) -> str:
    for cause in _causes(exc):
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused"
        if isinstance(cause, socket.gaierror):
            return "host name not found"
        if isinstance(cause, ConnectionResetError):
            return "connection reset"
        if isinstance(cause, OSError) and cause.errno is not None and cause.strerror:
            return cause.strerror.lower()
    return "the connection failed"


def _tls_reason(exc: BaseException) -> str:
    for cause in _causes(exc):
        if isinstance(cause, ssl.SSLCertVerificationError):
            return f"cannot verify the ZVM's TLS certificate ({cause.verify_message or 'untrusted'})"
    for cause in _causes(exc):
        if isinstance(cause, ssl.SSLError) and cause.reason:
            return f"the TLS handshake failed ({str(cause.reason).lower().replace('_', ' ')})"
    return "the TLS handshake failed"


def one_line(text: str, limit: int = _MAX_MESSAGE) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


# A request sent more than ``LATE_S`` after its slot takes a new one (``Transport.pace``), at
# most this many times.
RESERVE_TRIES = 4


class _WireCheck:
    """A request's slot, checked again once its connection is ready and its bytes are about to leave."""

    def __init__(self, transport: Transport, due: float, method: str, path: str, request_id: str) -> None:
        self.transport, self.due = transport, due
        self.what = (method, path, request_id)

    def late_then_waited(self) -> bool:
        """On time: False. Late past ``LATE_S`` (a slow handshake, a busy core): a new slot, waited for; True."""
        if self.transport.clock() - self.due <= LATE_S:
            return False
        due = self.transport.pace(*self.what)
        self.due = self.transport.clock() if due is None else due
        return True


class Transport:
    """Sends one HTTP request to one ZVM and maps failures to ``ZvmError``s."""

    def __init__(
        self,
        conn: ZvmConnection,
        session: requests.Session | None = None,
        pacer: Pacer | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        counter: RequestCounter | None = None,
    ) -> None:
        self.conn = conn
        self.session = session or build_session(conn.verify)
        # Without a shared pacer the cap is counted in this process (one count per ZVM for all clients).
        self.pacer: Pacer = pacer if pacer is not None else LOCAL_PACER
        self.counter = counter  # None: requests are not counted (rewind.zvm.counting)
        self._sleep = sleep
        self.clock = clock
        self._secrets: set[str] = {s for s in (conn.password, conn.client_secret) if s}

    # -- secrets -------------------------------------------------------------------
    def remember_secret(self, value: str) -> None:
        """Register a token so any text we did not write is scrubbed of it."""
        if value:
            self._secrets.add(value)

    def redact(self, text: str) -> str:
        for secret in sorted(self._secrets, key=len, reverse=True):
            if len(secret) >= 3:
                text = text.replace(secret, "***")
        return text

    # -- errors --------------------------------------------------------------------
    def error(self, cls: type[ZvmError], message: str, **kw: Any) -> ZvmError:
        return cls(self.conn.site_name, self.redact(message), base_url=self.conn.display_url, **kw)

    def error_from_exception(self, exc: requests.RequestException, what: str) -> ZvmError:
        c, r = self.conn.connect_timeout, self.conn.read_timeout
        if isinstance(exc, requests.exceptions.SSLError):
            return self.error(ZvmTlsError, _tls_reason(exc))
        if isinstance(exc, requests.exceptions.ConnectTimeout):
            return self._timed_out(f"cannot connect (no answer within {c:g} s)")
        if isinstance(exc, requests.exceptions.ReadTimeout):
            return self._timed_out(f"the ZVM did not answer {what} within {r:g} s")
        if isinstance(exc, requests.exceptions.ChunkedEncodingError):
            return self.error(ZvmTransientError, f"the answer to {what} was cut off")
        if isinstance(exc, requests.exceptions.ConnectionError):
            if any(isinstance(x, ssl.SSLError) for x in _causes(exc)):
                return self.error(ZvmTlsError, _tls_reason(exc))
            if any(isinstance(x, http.client.RemoteDisconnected) for x in _causes(exc)):
                return self.error(ZvmTransientError, f"the ZVM closed the connection without answering {what}")
            return self.error(ZvmTransientError, f"cannot connect ({_connect_reason(exc)})")
        # InvalidURL, MissingSchema and friends: the configured address is unusable.
        return self.error(ZvmRejectedError, f"cannot send {what}: {type(exc).__name__}")

    def _timed_out(self, message: str) -> ZvmError:
        error = self.error(ZvmTransientError, message)
        error.timed_out = True  # one is enough to open the site's circuit (rewind.zvm.breaker)
        return error

    def error_for_status(self, resp: requests.Response, what: str) -> ZvmError:
        status = resp.status_code
        raw_message = zvm_message(resp)
        message = self.redact(raw_message) if raw_message else None
        said = f": {message}" if message else ""
        kw: dict[str, Any] = {"status": status, "zvm_message": message}
        if status == 429:
            return self.error(ZvmTransientError, f"the ZVM is busy (HTTP 429){said} ({what})", **kw)
        if status >= 500:
            return self.error(ZvmTransientError, f"the ZVM answered HTTP {status}{said} ({what})", **kw)
        if status == 404:
            return self.error(ZvmNotFoundError, f"the ZVM answered HTTP 404 (not found){said} ({what})", **kw)
        if 400 <= status < 500:
            return self.error(ZvmRejectedError, f"the ZVM rejected {what} (HTTP {status}){said}", **kw)
        return self.error(ZvmRejectedError, f"unexpected HTTP {status} answer to {what}", **kw)

    # -- the one network call ------------------------------------------------------
    def pace(self, method: str, path: str, request_id: str) -> float | None:
        """Wait for this request's slot under the site's cap (it is counted even if it then fails). A sender that
        wakes up late past ``LATE_S`` (a busy core, the GIL) would arrive beside the next window's requests, so
        it takes a new slot. Returns when the slot was due (None: no cap), which ``_WireCheck`` holds the
        sending to."""
        per_s = self.conn.max_requests_per_s
        if per_s is None:
            return None
        for _ in range(RESERVE_TRIES):
            wait = self.pacer.reserve(self.conn.zvm_key, per_s)
            due = self.clock() + wait
            if wait > 0:  # negative: the reservation returned after its slot (a slow commit, a busy core)
                logger.debug(
                    "%s %s waits %.0f ms for the cap of %g requests/s request_id=%s",
                    method,
                    path,
                    wait * 1000,
                    per_s,
                    request_id,
                )
                self._sleep(wait)
            if self.clock() - due <= LATE_S:
                return due
        logger.info(
            "%s %s: late for its slot %d times; sent anyway request_id=%s", method, path, RESERVE_TRIES, request_id
        )
        return None

    def send(
        self,
        method: str,
        url: str,
        *,
        request_id: str,
        headers: Mapping[str, str] | None = None,
        params: Mapping[str, Any] | None = None,
        json_body: Any = None,
        form: Mapping[str, str] | None = None,
        stream: bool = False,
    ) -> requests.Response:
        """Send one request; returns any HTTP answer, raises ``ZvmError`` when there is none."""
        path = urlsplit(url).path
        sent_headers = {
            "Accept": "application/json",
            "X-Request-ID": request_id,
            "zerto-triggered-by": TRIGGERED_BY,
            **(headers or {}),
        }
        due = self.pace(method, path, request_id)
        _on_wire.check = None if due is None else _WireCheck(self, due, method, path, request_id)
        started = time.monotonic()
        try:
            resp = self.session.request(
                method,
                url,
                headers=sent_headers,
                params={k: v for k, v in (params or {}).items() if v is not None} or None,
                json=json_body,
                data=form,
                stream=stream,
                timeout=(self.conn.connect_timeout, self.conn.read_timeout),
                verify=self.conn.verify,
                # Redirects only for GETs (download links may redirect); requests drops
                # the Authorization header itself when a redirect leaves the host.
                allow_redirects=method == "GET",
            )
        except requests.RequestException as exc:
            ms = (time.monotonic() - started) * 1000
            logger.debug(
                "%s %s failed after %.0f ms (%s) request_id=%s", method, path, ms, type(exc).__name__, request_id
            )
            error = self.error_from_exception(exc, f"{method} {path}")
            self._count(no_answer(error))
            raise error from exc
        finally:
            _on_wire.check = None  # never left for the thread's next request
        ms = (time.monotonic() - started) * 1000
        logger.debug("%s %s -> %s in %.0f ms request_id=%s", method, path, resp.status_code, ms, request_id)
        self._count(answered(resp.status_code))
        return resp

    def _count(self, result: str) -> None:
        if self.counter is None:
            return
        try:
            self.counter.count(self.conn.site_name, result)
        except Exception as exc:  # a metric never fails the call it counts
            logger.warning("a ZVM request was not counted (%s)", type(exc).__name__)


def zvm_message(resp: requests.Response) -> str | None:
    """The ZVM's ``Message`` (or Keycloak's ``error_description``/``error``) from an error body."""
    try:
        raw = b""
        for chunk in resp.iter_content(8192):
            raw += chunk
            if len(raw) >= _MAX_ERROR_BODY:
                break
    except requests.RequestException:
        return None
    finally:
        resp.close()
    if not raw.strip():
        return None
    try:
        body = json.loads(raw.decode("utf-8", "replace"))
    except ValueError:
        text = raw.decode("utf-8", "replace")
        return one_line(text) if "<" not in text[:200] else None  # skip HTML error pages
    if isinstance(body, str):
        return one_line(body)
    if isinstance(body, dict):
        lowered = {str(k).lower(): v for k, v in body.items()}
        for key in ("message", "error_description", "error", "title"):
            if isinstance(lowered.get(key), str) and lowered[key].strip():
                return one_line(lowered[key])
    return None
