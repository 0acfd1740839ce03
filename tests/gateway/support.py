"""Fixtures for gateway tests: the guest shell (``tests.gateway.guestshell``) as a real upstream MCP server.

- ``guestshell_http`` (function): the guest shell over streamable HTTP, requiring a bearer token,
  against the session's simulator (reset for the test, as ``sim`` does). Yields a
  :class:`GuestShellHttp`: ``.url`` (``http://127.0.0.1:PORT/mcp``), ``.token``, ``.headers``
  (the Authorization header to send), ``.calls()`` (the tool calls it received during this test:
  dicts with ``tool``, ``arguments`` and ``authorization``) and ``.clear()``. The process is
  shared by the session; the record is emptied before each test.
- ``guestshell_stdio_command`` (function): how to launch the stdio variant, a
  :class:`GuestShellStdio`: ``.argv``, ``.env`` (the full environment), ``.cwd``,
  ``.params()`` (``mcp.client.stdio.StdioServerParameters``) and ``.calls()`` from its own record.

``run_guestshell(work_dir, sim_server, *args)`` starts another HTTP guest shell with other
options (say, no ``--token``). Each is a ``rewind.lib.processes.Proc``, like the simulator."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rewind.audit import Actor
from rewind.gateway.listing import upstream_tools_refresh
from rewind.gateway.models import Upstream
from rewind.gateway.services import upstream_create, upstream_tools_approve_listed
from rewind.lib.processes import Proc
from tests.gateway.guestshell import READY
from tests.simfixtures import PYTHON, REPO, SimAddress, SimServer

MODULE = "tests.gateway.guestshell"


def read_calls(record: Path) -> list[dict[str, Any]]:
    """The tool calls a guest shell recorded, oldest first."""
    if not record.exists():
        return []
    return [json.loads(line) for line in record.read_text(encoding="utf-8").splitlines() if line.strip()]


def sim_args(sim_server: SimServer | SimAddress) -> list[str]:
    args = ["--sim-url", sim_server.url]
    if sim_server.ca_bundle:
        args += ["--ca-bundle", sim_server.ca_bundle]
    return args


@dataclass
class GuestShellHttp:
    proc: Proc
    url: str
    token: str | None
    record: Path
    argv: list[str] = field(default_factory=list)

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1].split("/", 1)[0])

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def calls(self) -> list[dict[str, Any]]:
        return read_calls(self.record)

    def clear(self) -> None:
        self.record.write_text("", encoding="utf-8")

    def stop(self) -> None:
        self.proc.stop(timeout=10)

    def start_again(self) -> None:
        """Start it again on the same port (after ``stop``): a restarted upstream, which kept nothing."""
        argv = [*self.argv, "--port", str(self.port)]
        self.proc = _launch(argv, self.record.parent)


def _launch(argv: list[str], work_dir: Path) -> Proc:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    log = work_dir / "guestshell.log"
    earlier = log.read_text(errors="replace").count(READY) if log.exists() else 0  # one log for every start
    proc = Proc("guestshell", argv, log=log, cwd=REPO, env=env, append=True)
    try:
        proc.wait_for_output(READY, count=earlier + 1, timeout=60)
    except Exception:
        proc.kill()
        raise
    return proc


def start_guestshell(work_dir: Path, sim_server: SimServer, *args: str, token: str | None = None) -> GuestShellHttp:
    """Start ``python -m tests.gateway.guestshell --http --port 0`` and wait for its ready line."""
    work_dir.mkdir(parents=True, exist_ok=True)
    record = work_dir / "calls.jsonl"
    record.write_text("", encoding="utf-8")
    argv = [PYTHON, "-m", MODULE, "--http", *sim_args(sim_server), "--record", str(record), *args]
    if token:
        argv += ["--token", token]
    proc = _launch([*argv, "--port", "0"], work_dir)
    output = proc.output()
    url = [line[len(READY) :].strip() for line in output.splitlines() if line.startswith(READY)][-1]
    return GuestShellHttp(proc, url, token, record, argv)


@contextlib.contextmanager
def run_guestshell(
    work_dir: Path, sim_server: SimServer, *args: str, token: str | None = None
) -> Iterator[GuestShellHttp]:
    server = start_guestshell(work_dir, sim_server, *args, token=token)
    try:
        yield server
    finally:
        server.stop()


@dataclass
class GuestShellStdio:
    argv: list[str]
    env: dict[str, str]
    record: Path
    cwd: Path = field(default=REPO)

    def params(self) -> Any:
        from mcp.client.stdio import StdioServerParameters

        return StdioServerParameters(command=self.argv[0], args=self.argv[1:], env=self.env, cwd=self.cwd)

    def calls(self) -> list[dict[str, Any]]:
        return read_calls(self.record)


def add_http_upstream(shell: GuestShellHttp, name: str = "guestshell", **fields: Any) -> Upstream:
    """The guest shell as an upstream, its tools listed and their definitions approved, as an admin would."""
    upstream = upstream_create(
        actor=Actor.user("admin"), name=name, transport="http", url=shell.url, headers=shell.headers, **fields
    )
    return listed_and_approved(upstream)


def listed_and_approved(upstream: Upstream) -> Upstream:
    upstream_tools_refresh(upstream)
    upstream_tools_approve_listed(actor=Actor.user("admin"), upstream=upstream)
    return upstream


def guest_shell_file_tools(shell: GuestShellHttp, os: str = "linux", **fields: Any) -> Upstream:
    """The guest shell as an upstream whose write_file and read_file write and read ``os`` guests' files
    (base64); ``fields`` override the guest file tools' settings (another writer, a VM pattern)."""
    from recoveries.restore.guest_tools import guest_file_tools_set  # the gateway tests without it import no app

    upstream = add_http_upstream(shell, default_policy="pass")
    settings = {
        "writer_tool": "write_file",
        "reader_tool": "read_file",
        "content_encoding": "base64",
        "encoding_arg": "encoding",
        **fields,
    }
    guest_file_tools_set(actor=Actor.user("admin"), upstream=upstream, os=os, **settings)
    return upstream


def restore_until(tasks: Any, recovery: Any, *states: str, timeout: float = 120) -> Any:
    """The recovery, once its restore reached one of ``states`` (``tasks``: inline tasks or the real worker's)."""

    def reached() -> bool:
        recovery.refresh_from_db()
        return recovery.restore_state in states

    tasks.wait_for(reached, timeout=timeout)
    return recovery


def call_at_once(mcp_client: Any, token: str, args: dict[str, Any], change_id: str | None = None) -> Any:
    """A gateway call that answers at once when held (``zerto-rewind/wait: false``)."""
    meta: dict[str, Any] = {"zerto-rewind/wait": False}
    if change_id is not None:
        meta["zerto-rewind/change_id"] = change_id

    async def go() -> Any:
        async with mcp_client(token) as client:
            return await client.call_tool("guestshell__exec", args, meta=meta)

    from tests.helpers import run  # the gateway tests without it import no app

    return run(go())
