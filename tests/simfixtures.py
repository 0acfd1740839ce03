"""pytest plugin: the ZVM simulator (zvmsim) in a subprocess, shared by the test session.

Fixtures:
- ``sim_server`` (session): ``python -m zvmsim --port 0 --cert-dir <tmp>``; ``.url``, ``.site_url(slug)``,
  ``.ca_bundle``.
- ``sim`` (function): resets the simulator, then yields a :class:`SimHandle`.

``run_sim(tmp_dir, *args)`` starts an extra simulator with other options (e.g. ``--vms 10000``
or ``--token-ttl 2``) for the tests that need one. Like every process the tests start, it is a
``rewind.lib.processes.Proc``: a session of its own, its output in a log, stopped with its group.
"""

from __future__ import annotations

import base64
import contextlib
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from rewind.lib.processes import Proc, ProcessError
from tests.markers import processes_allowed
from zvmsim.auth import PASSWORD, PASSWORD_CLIENT_ID, USERNAME
from zvmsim.control_client import control_session

REPO = Path(__file__).resolve().parent.parent
_VENV_PYTHON = REPO / ".venv" / "bin" / "python"
PYTHON = str(_VENV_PYTHON) if _VENV_PYTHON.exists() else sys.executable
READY = "zvmsim ready on "
CA_BUNDLE = "zvmsim CA bundle: "
START_TIMEOUT = 60.0

# Admin credentials every simulated site accepts, as the simulator defines them.
CLIENT_ID = PASSWORD_CLIENT_ID


class SimError(RuntimeError):
    pass


class SimServer:
    """A running zvmsim process."""

    def __init__(self, proc: Proc, url: str, ca_bundle: str | None) -> None:
        self.proc = proc
        self.url = url
        self.ca_bundle = ca_bundle
        assert proc.log is not None
        self.log = proc.log

    def site_url(self, slug: str) -> str:
        return f"{self.url}/{slug}"

    def stop(self) -> None:
        self.proc.stop(timeout=10)


def _line_value(output: str, prefix: str) -> str | None:
    """What follows ``prefix`` on the first line of ``output`` that starts with it."""
    return next((line[len(prefix) :].strip() for line in output.splitlines() if line.startswith(prefix)), None)


def start_sim(work_dir: Path, *args: str) -> SimServer:
    """Start ``python -m zvmsim`` with a free port and wait for its ready line."""
    work_dir.mkdir(parents=True, exist_ok=True)
    cmd = [PYTHON, "-m", "zvmsim", "--port", "0", "--cert-dir", str(work_dir / "certs"), *args]
    proc = Proc("zvmsim", cmd, log=work_dir / "zvmsim.log", cwd=REPO, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        output = proc.wait_for_output(READY, timeout=START_TIMEOUT)
    except ProcessError as exc:
        proc.kill()
        raise SimError(str(exc)) from None
    url = _line_value(output, READY)
    assert url is not None
    return SimServer(proc, url, _line_value(output, CA_BUNDLE))


@contextlib.contextmanager
def run_sim(work_dir: Path, *args: str) -> Iterator[SimServer]:
    server = start_sim(work_dir, *args)
    try:
        yield server
    finally:
        server.stop()


@dataclass(frozen=True)
class SimAddress:
    """Where a simulator that a test did not start answers (e.g. the one ``manage.py runstack`` starts)."""

    url: str
    ca_bundle: str | None

    def site_url(self, slug: str) -> str:
        return f"{self.url}/{slug}"


class SimHandle:
    """Test-side handle on a simulator: control API calls and small conveniences."""

    def __init__(self, server: SimServer | SimAddress) -> None:
        self.server = server
        self.url = server.url
        self.ca_bundle = server.ca_bundle
        self.http = control_session()

    def site_url(self, slug: str) -> str:
        return self.server.site_url(slug)

    def control(self, method: str, path: str, json: Any = None, **params: Any) -> Any:
        """Call /_sim/<path>; returns the JSON answer, raises SimError on a non-2xx status."""
        path = path if path.startswith("/_sim/") else "/_sim/" + path.lstrip("/")
        resp = self.http.request(method, self.url + path, json=json, params=params or None, timeout=60)
        if resp.status_code >= 300:
            raise SimError(f"{method} {path} -> {resp.status_code}: {resp.text}")
        if resp.headers.get("content-type", "").startswith("application/json"):
            return resp.json()
        return resp.content

    def reset(self) -> None:
        self.control("POST", "reset")

    def state(self) -> dict[str, Any]:
        return self.control("GET", "state")

    def add_fault(self, kind: str, site: str | None = None, **params: Any) -> Any:
        count = params.pop("count", None)
        return self.control("POST", "faults", {"kind": kind, "site": site, "count": count, **params})

    def clear_faults(self) -> None:
        self.control("DELETE", "faults")

    def set_variants(self, site: str | None = None, **changes: Any) -> dict[str, Any]:
        """Change how a site's ZVM (or every site's, with ``site`` None) behaves where the API
        is undocumented (``zvmsim/variants.py``); ``preset="name"`` applies a named set."""
        return self.control("POST", "variants", {"site": site, **changes})

    def variants(self, site: str) -> dict[str, Any]:
        return self.control("GET", "variants")["sites"][site]

    def rate(self, slug: str) -> dict[str, Any]:
        """Requests this site got since the last reset, and the most in any one second."""
        return self.control("GET", f"sites/{slug}/rate")

    def set_latency(self, ms: float, site: str | None = None) -> None:
        self.control("POST", "latency", {"site": site, "ms": ms})

    def set_file(
        self,
        vm: str,
        path: str,
        text: str | None = None,
        content: bytes | None = None,
        size: int | None = None,
        seed: int | None = None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"path": path}
        if text is not None:
            body["text"] = text
        elif content is not None:
            body["content_b64"] = base64.b64encode(content).decode()
        elif size is not None:
            body.update(size=size, seed=seed or 0)
        else:
            raise ValueError("give text, content or size")
        return self.control("PUT", f"vms/{vm}/files", body)

    def delete_file(self, vm: str, path: str) -> dict[str, Any]:
        return self.control("DELETE", f"vms/{vm}/files", {"path": path})

    def read_file(self, vm: str, path: str) -> bytes:
        resp = self.http.get(f"{self.url}/_sim/vms/{vm}/files", params={"path": path}, timeout=60)
        if resp.status_code != 200:
            raise SimError(f"read {vm}:{path} -> {resp.status_code}: {resp.text}")
        return resp.content

    def vm(self, name: str) -> dict[str, Any]:
        return self.control("GET", f"vms/{name}")

    def sessions(self, slug: str) -> list[dict[str, Any]]:
        return self.control("GET", f"sites/{slug}/flrs")

    def open_foreign_session(self, slug: str, vm: str, vpg: str, checkpoint: str | None = None) -> str:
        body = {"vm": vm, "vpg": vpg, "checkpoint": checkpoint}
        return self.control("POST", f"sites/{slug}/flrs", body)["session_id"]

    def calls(self, slug: str) -> dict[str, int]:
        return self.control("GET", f"sites/{slug}/calls")

    def requests_seen(self, slug: str) -> int:
        """The requests the site received, every path together."""
        return sum(self.calls(slug).values())

    def resync(self, vpg: str) -> None:
        self.control("POST", f"vpgs/{vpg}/resync")

    def set_journal_history(self, vpg: str, minutes: float) -> dict[str, Any]:
        """The VPG's journal keeps ``minutes`` of history; older checkpoints leave it at once."""
        return self.control("POST", f"vpgs/{vpg}/journal", {"history_minutes": minutes})

    def set_auto_checkpoints(self, seconds: float, vpg: str | None = None) -> dict[str, Any]:
        """An automatic journal checkpoint every ``seconds`` from now on (0: none), in one VPG's
        journal or (``vpg`` None) every VPG's; those taken so far stay."""
        if vpg is None:
            return self.control("POST", "journals", {"auto_checkpoint_s": seconds})
        return self.control("POST", f"vpgs/{vpg}/journal", {"auto_checkpoint_s": seconds})

    def journal(self, vpg: str) -> dict[str, Any]:
        return self.control("GET", f"vpgs/{vpg}/journal")

    def advance_clock(self, seconds: float) -> dict[str, Any]:
        """Let ``seconds`` pass at once in the simulated world (every site's ZVM clock moves).

        This process's clock does not move with it: a test that compares times with the ZVMs
        moves its own too (``time_machine.travel``), or every ZVM looks that far ahead.
        """
        return self.control("POST", "clock", {"advance_s": seconds})

    def set_vpg_status(self, vpg: str, status: int, sub_status: int = 0) -> None:
        self.control("POST", f"vpgs/{vpg}/status", {"status": status, "sub_status": sub_status})

    def token(self, slug: str) -> str:
        """An access token for a site (password grant as admin)."""
        resp = self.http.post(
            f"{self.site_url(slug)}/auth/realms/zerto/protocol/openid-connect/token",
            data={"grant_type": "password", "client_id": CLIENT_ID, "username": USERNAME, "password": PASSWORD},
            timeout=30,
        )
        if resp.status_code != 200:
            raise SimError(f"token for {slug} -> {resp.status_code}: {resp.text}")
        return str(resp.json()["access_token"])


@pytest.fixture(scope="session")
def sim_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimServer]:
    # The one process every run has, the quick run included (tests.markers).
    with processes_allowed():
        server = start_sim(tmp_path_factory.mktemp("zvmsim"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def sim(sim_server: SimServer) -> Iterator[SimHandle]:
    handle = SimHandle(sim_server)
    handle.reset()
    yield handle
    handle.http.close()
