"""``ZvmClient``: the one way this project talks to a ZVM.

Every call goes through ``_request`` (token, one re-login on 401, bounded retries of GETs) and
``Transport.send`` (timeouts, TLS, request id, logging), and returns the typed results of ``types.py``. One
client may be shared by threads. Every method may raise a ``ZvmError``; those that change the ZVM say so, the
others are safe to repeat.
"""

from __future__ import annotations

import os
import random
import threading
import time
import uuid
import zipfile
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime
from functools import wraps
from typing import Any, BinaryIO, ParamSpec, TypeVar
from urllib.parse import quote, urlsplit

import requests

from ._fields import Fields, format_datetime
from .auth import TokenKeeper
from .breaker import LOCAL_BREAKER, Breaker, counts_against_site, opens_at_once, refusal
from .clock import ClockOffset, ZvmClock
from .connection import ZvmConnection
from .counting import RequestCounter
from .download import NotOneFile, clean_link, resolve_link, same_origin, stream_to_sink
from .errors import (
    ZvmAuthError,
    ZvmError,
    ZvmNotFoundError,
    ZvmRejectedError,
    ZvmSiteUnavailable,
    ZvmTransientError,
    ZvmUnparseableResponse,
)
from .pacing import Pacer
from .tokenstore import MemoryTokenStore, TokenStore
from .transport import Transport
from .types import (
    BrowseResult,
    Checkpoint,
    CheckpointStats,
    DownloadResult,
    FlrSession,
    LocalSite,
    PeerSite,
    PointInTime,
    Task,
    VmList,
    VmRow,
    Vpg,
)

MIB = 1024 * 1024
When = datetime | str | None
P = ParamSpec("P")
R = TypeVar("R")
# Set while a public call runs, so the calls it makes itself are not counted twice.
_IN_CALL: ContextVar[bool] = ContextVar("zvm_in_call", default=False)


@dataclass(frozen=True)
class Stores:
    """Where a client counts its ZVM's request cap, keeps its tokens and tracks its circuit (by default: this
    process, this client, and requests not counted)."""

    pacer: Pacer | None = None  # None: the process-wide in-memory pacer
    tokens: TokenStore = field(default_factory=MemoryTokenStore)
    breaker: Breaker = LOCAL_BREAKER  # the process-wide in-memory circuits
    requests: RequestCounter | None = None  # None: requests are not counted


def _seg(identifier: str) -> str:
    """One URL path segment: ids are quoted so a stray '/' or '?' cannot change the path."""
    return quote(str(identifier), safe="")


class _Shared:
    """What a client and its ``with_request_id`` copies share: one ZVM's session state."""

    def __init__(self, conn: ZvmConnection, stores: Stores | None = None) -> None:
        stores = stores or Stores()
        self.transport = Transport(conn, pacer=stores.pacer, counter=stores.requests)
        self.breaker = stores.breaker
        self.tokens = TokenKeeper(self.transport, stores.tokens)
        self.names: dict[str, list[str]] = {}
        self.names_lock = threading.Lock()
        self.clock = ZvmClock()  # the ZVM's clock beside ours, from the Date of its answers


def _call(method: Callable[P, R]) -> Callable[P, R]:
    """One public call as the site's circuit sees it (``rewind.zvm.breaker``): refused while the circuit is open; a
    usable answer (404 and other 4xx included) closes it; a call that ends without one counts one failure (a
    timeout is counted by ``_request`` at once, so that it is not retried once it opened the circuit)."""

    @wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        self = args[0]
        assert isinstance(self, ZvmClient)
        if _IN_CALL.get():
            return method(*args, **kwargs)
        self._admit()
        token = _IN_CALL.set(True)
        try:
            result = method(*args, **kwargs)
        except ZvmError as exc:
            if counts_against_site(exc):
                if not exc.circuit_counted:
                    self._site_failed(exc)
            elif not isinstance(exc, ZvmSiteUnavailable):
                self._site_answered()
            raise
        finally:
            _IN_CALL.reset(token)
        self._site_answered()
        return result

    return wrapper


class ZvmClient:
    # How long a download link may answer 404 or 409 while the ZVM prepares it (undocumented: a large zip may
    # come first; the simulator's ``download_pending_status`` variant gives either). Asked again after 0.5 s,
    # doubling up to every 2 s.
    download_ready_timeout_s = 60.0
    download_ready_delay = 0.5

    def __init__(
        self,
        conn: ZvmConnection,
        *,
        request_id: str | None = None,
        stores: Stores | None = None,
        _shared: _Shared | None = None,
        _sleep: Callable[[float], None] = time.sleep,
        _gated: bool = True,
    ) -> None:
        """``stores``: where the cap is counted, tokens kept and the circuit tracked (default: this client, this
        process)."""
        self.conn = conn
        self.request_id = request_id
        self._shared = _shared or _Shared(conn, stores)
        self._sleep = _sleep
        self._gated = _gated

    def __repr__(self) -> str:
        return f"ZvmClient({self.conn!r}, request_id={self.request_id!r})"

    def with_request_id(self, request_id: str | None) -> ZvmClient:
        """A client for the same ZVM whose calls carry ``request_id`` (shares token and pool)."""
        return ZvmClient(self.conn, request_id=request_id, _shared=self._shared, _sleep=self._sleep, _gated=self._gated)

    def ungated(self) -> ZvmClient:
        """A copy whose calls go even while the site's circuit is open (probes, a person's check); their outcome
        still counts."""
        return ZvmClient(self.conn, request_id=self.request_id, _shared=self._shared, _sleep=self._sleep, _gated=False)

    # -- the site's circuit --------------------------------------------------------
    def _admit(self) -> None:
        if not self._gated:
            return
        refused = self._shared.breaker.admit(self.conn.circuit_id)
        if refused is not None:
            raise refusal(self.conn.site_name, refused, base_url=self.conn.display_url)

    def _site_failed(self, exc: ZvmError) -> bool:
        """Count ``exc`` against the site; True when its circuit is open now."""
        exc.circuit_counted = True
        state = self._shared.breaker.failed(
            self.conn.circuit_id, self.conn.site_name, exc.message, at_once=opens_at_once(exc)
        )
        return state.is_open

    def _site_answered(self) -> None:
        self._shared.breaker.answered(self.conn.circuit_id, self.conn.site_name)

    def close(self) -> None:
        self._shared.transport.session.close()

    def __enter__(self) -> ZvmClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def clock_offset(self) -> ClockOffset | None:
        """The ZVM's clock minus ours, from its recent answers; None before any dated answer."""
        return self._shared.clock.offset()

    # -- sites ---------------------------------------------------------------------
    @_call
    def local_site(self) -> LocalSite:
        """The site of the ZVM called (``GET /v1/localsite``)."""
        return LocalSite.from_json(self._one(self._get("/v1/localsite"), "the local site"))

    @_call
    def peer_sites(self) -> list[PeerSite]:
        """Paired sites (``GET /v1/peersites``)."""
        return [PeerSite.from_json(row) for row in self._list(self._get("/v1/peersites"))]

    # -- VMs and VPGs --------------------------------------------------------------
    @_call
    def list_vms(self, *, vm_name: str | None = None, vm_identifier: str | None = None) -> list[VmRow]:
        """One row per (VM, VPG) pair; filters are the ZVM's own (case-insensitive)."""
        params = {"vmName": vm_name, "vmIdentifier": vm_identifier}
        return [VmRow.from_json(row) for row in self._list(self._get("/v1/vms", params))]

    @_call
    def vm_list(self) -> VmList:
        """Every (VM, VPG) row the ZVM lists (``GET /v1/vms`` unfiltered), parsed as each is read."""
        return VmList(self._list(self._get("/v1/vms")))

    @_call
    def list_vpgs(self, *, name: str | None = None) -> list[Vpg]:
        return [Vpg.from_json(row) for row in self._list(self._get("/v1/vpgs", {"name": name}))]

    @_call
    def get_vpg(self, vpg_id: str) -> Vpg:
        """Raises ``ZvmNotFoundError`` for an unknown VPG."""
        return Vpg.from_json(self._one(self._get(f"/v1/vpgs/{_seg(vpg_id)}"), f"VPG {vpg_id}"))

    @_call
    def vpg_status_names(self) -> list[str]:
        """``GET /v1/vpgs/statuses``: names in enum order (cached per client)."""
        return self._names("/v1/vpgs/statuses")

    @_call
    def vpg_substatus_names(self) -> list[str]:
        """``GET /v1/vpgs/substatuses``: names in enum order (cached per client)."""
        return self._names("/v1/vpgs/substatuses")

    def status_name(self, code: int | None) -> str | None:
        """The ZVM's own name for VPG/VM status ``code`` (sources disagree on 3 and 4)."""
        return self._name_at(self.vpg_status_names(), code)

    def substatus_name(self, code: int | None) -> str | None:
        return self._name_at(self.vpg_substatus_names(), code)

    # -- checkpoints and tasks -----------------------------------------------------
    @_call
    def insert_tagged_checkpoint(self, vpg_id: str, tag: str) -> str:
        """Ask the ZVM to add a tagged checkpoint; returns the task id. Changes the ZVM and is never retried here:
        a repeat adds a second checkpoint."""
        resp = self._request("POST", f"/v1/vpgs/{_seg(vpg_id)}/checkpoints", json_body={"checkpointName": tag})
        return self._string(resp, "the tagged checkpoint insert")

    @_call
    def get_task(self, task_id: str) -> Task:
        return Task.from_json(self._one(self._get(f"/v1/tasks/{_seg(task_id)}"), f"task {task_id}"))

    @_call
    def list_tasks(self, *, task_type: str | None = None, started_after: When = None) -> list[Task]:
        """Tasks, filtered by the ZVM on type (e.g. ``InsertTaggedCP``) and start time."""
        params: dict[str, str] = {}
        if task_type:
            params["type"] = task_type
        if started_after is not None:
            params["startedAfterDate"] = format_datetime(started_after)
        return [Task.from_json(row) for row in self._list(self._get("/v1/tasks", params))]

    @_call
    def list_checkpoints(self, vpg_id: str, *, start: When = None, end: When = None) -> list[Checkpoint]:
        """Journal checkpoints; pass ``start``: an unfiltered list can hold days of them."""
        params = self._window(start, end)
        rows = self._list(self._get(f"/v1/vpgs/{_seg(vpg_id)}/checkpoints", params))
        return [Checkpoint.from_json(row) for row in rows]

    @_call
    def checkpoint_stats(self, vpg_id: str) -> CheckpointStats:
        resp = self._get(f"/v1/vpgs/{_seg(vpg_id)}/checkpoints/stats")
        return CheckpointStats.from_json(self._one(resp, "the checkpoint stats"))

    @_call
    def points_in_time(self, vm_id: str, *, vpg_id: str, start: When = None, end: When = None) -> list[PointInTime]:
        """Checkpoints of one VM in one VPG, each with ``can_mount`` (FLR eligibility)."""
        params = {"vpgIdentifier": vpg_id, **self._window(start, end)}
        rows = self._list(self._get(f"/v1/vms/{_seg(vm_id)}/pointsInTime", params))
        return [PointInTime.from_json(row) for row in rows]

    # -- file level recovery -------------------------------------------------------
    @_call
    def flr_mount(self, *, vpg_id: str, vm_id: str, checkpoint_id: str) -> str:
        """Start an FLR mount; returns the session id. Changes the ZVM; never retried. Raises
        ``ZvmUnparseableResponse`` when the answer is not a JSON string: the mount may have started anyway, so
        the caller should look for the session."""
        body = {"jflr": {"vpgIdentifier": vpg_id, "vmIdentifier": vm_id, "checkpointIdentifier": checkpoint_id}}
        resp = self._request("POST", "/v1/flrs", json_body=body)
        return self._string(resp, "the mount request", note=" (the mount may have started anyway)")

    @_call
    def list_flr_sessions(self, *, vm_id: str | None = None) -> list[FlrSession]:
        rows = self._list(self._get("/v1/flrs", {"vmIdentifier": vm_id}))
        return [FlrSession.from_json(row) for row in rows]

    @_call
    def get_flr_session(self, session_id: str) -> FlrSession:
        """One session; the ZVM may answer an object or a one-element array (both accepted)."""
        data = self._get(f"/v1/flrs/{_seg(session_id)}")
        if isinstance(data, list):
            matches = [r for r in data if Fields(r).text("FlrSessionIdentifier") in (session_id, None)]
            data = (matches or data)[:1]
            if not data:
                raise self._error(ZvmNotFoundError, f"FLR session {session_id} is not listed", status=404)
        return FlrSession.from_json(self._one(data, f"FLR session {session_id}"))

    @_call
    def flr_browse(self, session_id: str, path: str = "") -> BrowseResult:
        """List one folder of a mounted session; ``""`` lists the partitions. Paths use '/'."""
        body = {"path": path, "pageNumber": None, "pageSize": None}
        resp = self._request("POST", f"/v1/flrs/{_seg(session_id)}/browse", json_body=body)
        return BrowseResult.from_json(self._one(self._json(resp), f"the listing of {path or '/'}"))

    @_call
    def flr_download_url(self, session_id: str, paths: list[str]) -> str:
        """Ask for a download link of ``paths``; returns it absolute, quotes stripped."""
        resp = self._request("POST", f"/v1/flrs/{_seg(session_id)}/download", json_body={"pathList": paths})
        link = clean_link(self._string(resp, "the download request"))
        if not link:
            raise self._error(ZvmUnparseableResponse, "the download answer holds no link")
        return resolve_link(self.conn.root, link)

    @_call
    def flr_download(self, session_id: str, path: str, sink: BinaryIO, *, chunk_size: int = MIB) -> DownloadResult:
        """Stream the file at ``path`` into ``sink``, unwrapping a zip wrapper on the way, in memory bounded by
        ``chunk_size``; returns its size and sha256. Nothing is written before the ZVM starts sending, but a
        failure mid-stream leaves ``sink`` partly written."""
        url = self.flr_download_url(session_id, [path])
        resp = self._fetch_when_ready(url)
        try:
            content_type = resp.headers.get("Content-Type", "")
            return stream_to_sink(resp.iter_content(chunk_size), content_type, path, sink, chunk_size)
        except requests.RequestException as exc:
            raise self._shared.transport.error_from_exception(exc, "the download") from exc
        except (NotOneFile, zipfile.BadZipFile) as exc:
            raise self._error(ZvmUnparseableResponse, f"the download is not usable: {exc}") from exc
        finally:
            resp.close()

    @_call
    def flr_unmount(self, session_id: str) -> str:
        """End an FLR session (``DELETE /v1/flrs/{id}``); returns the ZVM's answer (a task id). Changes the ZVM;
        never retried here. A session already gone gives ``ZvmNotFoundError``, which callers may treat as done."""
        resp = self._request("DELETE", f"/v1/flrs/{_seg(session_id)}")
        if not resp.content.strip():
            return ""
        return self._string(resp, "the unmount request")

    # -- the chokepoint ------------------------------------------------------------
    def _request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json_body: Any = None,
        url: str | None = None,
        stream: bool = False,
    ) -> requests.Response:
        """Send one API call: a 2xx response, or a ``ZvmError``. GETs are retried on transient errors (bounded,
        exponential with jitter); POST and DELETE never are: the ZVM may have acted before the answer was lost."""
        target = url or self.conn.root + path
        rid = self.request_id or str(uuid.uuid4())  # one id per call, kept across its retries
        attempts = max(1, self.conn.get_attempts) if method == "GET" else 1
        for attempt in range(1, attempts + 1):
            if attempt > 1:
                self._admit()  # another caller may have found the site stuck meanwhile
            try:
                return self._authorized(method, target, rid, params, json_body, stream)
            except ZvmError as exc:
                # A timeout opens the circuit at once and is not retried: a stuck ZVM costs one
                # timeout, not one per attempt. Other failures count once per call (``_call``).
                if opens_at_once(exc) and self._site_failed(exc):
                    raise
                if not isinstance(exc, ZvmTransientError) or attempt == attempts:
                    raise
                self._sleep(self._backoff(attempt))
        raise AssertionError("unreachable")

    def _authorized(
        self, method: str, url: str, rid: str, params: Mapping[str, Any] | None, json_body: Any, stream: bool
    ) -> requests.Response:
        what = f"{method} {urlsplit(url).path}"
        transport, tokens = self._shared.transport, self._shared.tokens
        if not same_origin(url, self.conn.root):
            # A link to another host never gets our token.
            resp = transport.send(method, url, request_id=rid, params=params, json_body=json_body, stream=stream)
            return self._checked(resp, what)
        for fresh_login in (False, True):
            token = tokens.token(rid)
            resp = transport.send(
                method,
                url,
                request_id=rid,
                params=params,
                json_body=json_body,
                stream=stream,
                headers={"Authorization": f"Bearer {token}"},
            )
            if resp.status_code != 401:
                return self._checked(resp, what)
            resp.close()
            if fresh_login:
                break
            tokens.discard(token)  # expired or revoked early: log in again, once
        raise self._error(
            ZvmAuthError, f"the ZVM refused a freshly issued token ({what} answered HTTP 401)", status=401
        )

    def _checked(self, resp: requests.Response, what: str) -> requests.Response:
        self._shared.clock.observe(resp.headers.get("Date"), time.time(), resp.elapsed.total_seconds())
        if 200 <= resp.status_code < 300:
            return resp
        raise self._shared.transport.error_for_status(resp, what)

    def _backoff(self, attempt: int) -> float:
        base = min(self.conn.backoff_max, self.conn.backoff_initial * 2 ** (attempt - 1))
        return base * random.uniform(0.5, 1.0)  # jitter: parallel callers do not retry in step

    def _fetch_when_ready(self, url: str) -> requests.Response:
        delay = self.download_ready_delay
        deadline = time.monotonic() + self.download_ready_timeout_s
        while True:
            try:
                return self._request("GET", "", url=url, stream=True)
            except ZvmRejectedError as exc:
                if exc.status not in (404, 409) or time.monotonic() + delay > deadline:
                    raise
            self._sleep(delay)
            delay = min(2.0, delay * 2)

    # -- small helpers -------------------------------------------------------------
    def _get(self, path: str, params: Mapping[str, Any] | None = None) -> Any:
        return self._json(self._request("GET", path, params=params))

    def _error(self, cls: type[ZvmError], message: str, **kw: Any) -> ZvmError:
        return self._shared.transport.error(cls, message, **kw)

    def _json(self, resp: requests.Response) -> Any:
        try:
            return resp.json()
        except ValueError:
            what = f"{resp.request.method} {urlsplit(resp.url).path}" if resp.request else "the call"
            raise self._error(ZvmUnparseableResponse, f"the answer to {what} is not JSON") from None

    def _string(self, resp: requests.Response, what: str, note: str = "") -> str:
        try:
            value = resp.json()
        except ValueError:
            value = None
        if not isinstance(value, str):
            raise self._error(ZvmUnparseableResponse, f"the answer to {what} is not a JSON string{note}")
        return value.strip()

    def _list(self, data: Any) -> list[Any]:
        if data is None:
            return []
        if isinstance(data, list):
            return data
        if isinstance(data, dict):
            return [data]  # a lone object where a list was documented
        raise self._error(ZvmUnparseableResponse, "the answer is not a JSON list")

    def _one(self, data: Any, what: str) -> Any:
        if isinstance(data, list) and len(data) == 1:
            data = data[0]
        if not isinstance(data, dict):
            raise self._error(ZvmUnparseableResponse, f"the answer for {what} is not a JSON object")
        return data

    @staticmethod
    def _window(start: When, end: When) -> dict[str, str]:
        params: dict[str, str] = {}
        if start is not None:
            params["startDate"] = format_datetime(start)
        if end is not None:
            params["endDate"] = format_datetime(end)
        return params

    def _names(self, path: str) -> list[str]:
        shared = self._shared
        with shared.names_lock:
            cached = shared.names.get(path)
        if cached is not None:
            return list(cached)
        names = [str(n) for n in self._list(self._get(path)) if isinstance(n, (str, int))]
        with shared.names_lock:
            shared.names[path] = names
        return list(names)

    @staticmethod
    def _name_at(names: list[str], code: int | None) -> str | None:
        if code is None or not 0 <= code < len(names):
            return None
        return names[code]


_SHARED: dict[tuple[int, ZvmConnection, Callable[[], Stores]], _Shared] = {}
_SHARED_LOCK = threading.Lock()
_shared_stores: Callable[[], Stores] = Stores


def use_shared_stores(factory: Callable[[], Stores]) -> None:
    """Make ``shared_client`` count caps and keep tokens in what ``factory`` returns (the application's Redis or
    database stores, set once at start-up); without it, in this process."""
    global _shared_stores
    with _SHARED_LOCK:
        _shared_stores = factory


def shared_client(conn: ZvmConnection, *, request_id: str | None = None) -> ZvmClient:
    """A client reusing one HTTP pool and one token per connection settings in this process (a fresh ``ZvmClient``
    logs in every time). Keyed by process id too, so a forked worker never shares its parent's sockets."""
    with _SHARED_LOCK:
        key = (os.getpid(), conn, _shared_stores)  # clients made before a switch of stores keep theirs
        shared = _SHARED.get(key)
        if shared is None:
            shared = _SHARED[key] = _Shared(conn, _shared_stores())
    return ZvmClient(conn, request_id=request_id, _shared=shared)
