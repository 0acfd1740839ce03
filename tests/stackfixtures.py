"""pytest plugin: the production shape, on a PostgreSQL and a Redis of its own that tests restart and stop.

Fixtures:
- ``production_stack`` (session): ``manage.py runstack --replicas 2 --celery-workers 2`` (its own
  simulator, beat, two web replicas, two Celery workers) on a private PostgreSQL cluster and a
  private ``redis-server``, both on free ports in a temporary folder; ``.postgres`` and ``.redis``
  restart or stop them, ``.pid(name)`` / ``.kill(name)`` find and kill one supervised process
  (``web-1``, ``worker-2``, ``beat``, ...), ``.sim`` is a ``SimHandle`` on its simulator,
  ``.token`` an agent's bearer token, ``.manage(...)`` runs a management command against it.
  Tests share it (starting it costs some 20 s): each leaves it serving as it found it.

``RedisServer`` and ``PostgresServer`` are the private servers; the suite's own PostgreSQL and
Redis (and CI's) are never the ones a test stops.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from rewind.lib.processes import Proc, ProcessError, free_port, free_ports
from tests.fixtures import wait_until
from tests.helpers import run
from tests.mcpfixtures import open_mcp_client
from tests.simfixtures import PYTHON, REPO, SimAddress, SimHandle

START_TIMEOUT = 120.0
PG_BIN = Path("/usr/lib/postgresql/15/bin")


def _port_answers(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


class RedisServer:
    """A ``redis-server`` of the test's own that keeps nothing on disk (as the suite's and CI's)."""

    def __init__(self, work_dir: Path) -> None:
        if shutil.which("redis-server") is None:
            pytest.skip("redis-server is not installed (apt-get install redis-server; .ci/run does)")
        self.work_dir = work_dir
        self.port = free_port()
        self.proc: Proc | None = None
        self.start()

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def start(self) -> None:
        argv = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        self.proc = Proc(
            "redis-server", [*argv, "--dir", str(self.work_dir)], log=self.work_dir / "redis.log", append=True
        )
        self.proc.wait_until(lambda: _port_answers(self.port), what="answering")

    def stop(self) -> None:
        """Stop it at once: clients see their connections closed, then refused."""
        if self.proc is not None:
            self.proc.stop(sig=signal.SIGKILL, timeout=10)

    def restart(self, down_s: float = 0.0) -> None:
        self.stop()
        time.sleep(down_s)  # the outage itself: how long nothing answers is what the test is about
        self.start()


class PostgresServer:
    """A PostgreSQL cluster of the test's own (``initdb`` in a temporary folder), as user postgres when run as root."""

    def __init__(self) -> None:
        if not (PG_BIN / "initdb").exists():
            pytest.skip(f"PostgreSQL 15 is not installed ({PG_BIN}/initdb; .ci/run installs postgresql)")
        # Under /tmp, not pytest's folder: the postgres user must reach it, and root's is private.
        self.dir = Path(tempfile.mkdtemp(prefix="rewind-pg-"))
        self.port = free_port()
        self.proc: Proc | None = None
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")
        initdb = [str(PG_BIN / "initdb"), "-D", str(self.dir / "data"), "-U", "postgres", "-A", "trust", "--no-sync"]
        subprocess.run(self._as_postgres(initdb), check=True, capture_output=True, timeout=120)
        self.start()

    @staticmethod
    def _as_postgres(argv: list[str]) -> list[str]:
        # initdb and postgres refuse to run as root.
        return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv

    def url(self, name: str = "rewind") -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{name}"

    def start(self) -> None:
        options = ["-c", "listen_addresses=127.0.0.1", "-k", str(self.dir), "-c", "fsync=off"]
        argv = self._as_postgres(
            [str(PG_BIN / "postgres"), "-D", str(self.dir / "data"), "-p", str(self.port), *options]
        )
        self.proc = Proc("postgres", argv, log=self.dir / "postgres.log", append=True)
        self.proc.wait_until(self._ready, what="accepting connections")

    def _ready(self) -> bool:
        probe = [str(PG_BIN / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(self.port)]
        return subprocess.run(probe, check=False, timeout=10).returncode == 0

    def create_database(self, name: str) -> None:
        psql = ["psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-d", "postgres"]
        subprocess.run([*psql, "-q", "-c", f"CREATE DATABASE {name}"], check=True, capture_output=True, timeout=60)

    def stop(self) -> None:
        """A fast shutdown: every session is ended at once, as when a server restarts."""
        if self.proc is not None:
            self.proc.stop(sig=signal.SIGINT, timeout=30)

    def restart(self, down_s: float = 0.0) -> None:
        self.stop()
        time.sleep(down_s)  # the outage itself
        self.start()

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


FIRST_PROGRESS = re.compile(r"^guard #(\d+) \(change_id ([^)]+)\): ")


class BackgroundCall:
    """An agent's call running in a thread of its own, its progress notifications collected as they come."""

    def __init__(self, stack: ProductionStack, tool: str, args: dict[str, Any], replica: int) -> None:
        self.progress: list[Any] = []
        self._outcome: list[Any] = []

        def call() -> None:
            try:
                self._outcome.append(run(stack.call_async(tool, args, replica=replica, progress=self.progress)))
            except BaseException as exc:  # what the agent's client raises when the stream breaks
                self._outcome.append(exc)

        self._thread = threading.Thread(target=call, daemon=True)
        self._thread.start()

    def guard_refs(self, timeout: float = 60.0) -> tuple[int, str]:
        """The guard id and change id the first progress notification names (it must name both)."""
        first = wait_until(lambda: self.progress, timeout, what="the first progress notification")[0][2]
        named = FIRST_PROGRESS.match(first or "")
        assert named, first
        return int(named.group(1)), named.group(2)

    def outcome(self, timeout: float) -> Any:
        """The call's result, or what its client raised; fails if it has not ended within ``timeout``."""
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"the call did not end within {timeout:.0f} s"
        return self._outcome[0]


class ProductionStack:
    """``manage.py runstack`` in the production shape, on the private servers (see the module)."""

    REPLICAS = 2
    WORKERS = 2

    def __init__(self, work_dir: Path) -> None:
        self.work_dir = work_dir
        self.redis = RedisServer(work_dir)
        self.postgres = PostgresServer()
        self.postgres.create_database("rewind")
        self.port = free_ports(self.REPLICAS)
        self.sim_port = free_port()
        self.env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
        self.env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)  # the stack runs as in production
        self.env.update(
            DATABASE_URL=self.postgres.url(),
            REDIS_URL=self.redis.url(0),
            REWIND_VAR_DIR=str(work_dir / "var"),
            REWIND_PORT=str(self.port),
            REWIND_SIM_PORT=str(self.sim_port),
            REWIND_STORAGE_DIR=str(work_dir / "recovered"),
            PYTHONUNBUFFERED="1",
        )
        self.storage = work_dir / "recovered"
        self.manage("migrate", "-v0")
        self.proc = Proc(
            "runstack",
            [PYTHON, "manage.py", "runstack", "--replicas", str(self.REPLICAS), "--celery-workers", str(self.WORKERS)],
            log=work_dir / "runstack.log",
            cwd=REPO,
            env=self.env,
        )
        try:
            self.proc.wait_for_output("Press Ctrl-C", timeout=START_TIMEOUT)
        except ProcessError:
            self.stop()
            raise
        ca = Path(self.env["REWIND_VAR_DIR"]) / "sim" / "ca.pem"
        self.sim = SimHandle(SimAddress(f"https://127.0.0.1:{self.sim_port}", str(ca)))
        self.token = self.manage("createagent", f"heal-agent-{os.getpid()}").strip().splitlines()[-1]

    def url(self, replica: int = 1) -> str:
        return f"http://127.0.0.1:{self.port + replica - 1}"

    def mcp_url(self, replica: int = 1) -> str:
        return f"{self.url(replica)}/mcp"

    def manage(self, *args: str, timeout: float = 180.0) -> str:
        """``manage.py <args>`` against the stack's database and queue; its output (raises on failure)."""
        done = subprocess.run(
            [PYTHON, "manage.py", *args], cwd=REPO, env=self.env, capture_output=True, text=True, timeout=timeout
        )
        assert done.returncode == 0, f"manage.py {' '.join(args)}: {done.stdout[-2000:]}{done.stderr[-3000:]}"
        return done.stdout

    def output(self) -> str:
        return self.proc.output()

    def sql(self, query: str) -> str:
        """One query on the stack's database, its rows as psql prints them unaligned (``a|b`` per line)."""
        psql = ["psql", "-h", "127.0.0.1", "-p", str(self.postgres.port), "-U", "postgres", "-d", "rewind", "-At"]
        return subprocess.run([*psql, "-c", query], check=True, capture_output=True, text=True, timeout=60).stdout

    def ready(self, replica: int = 1) -> requests.Response:
        return requests.get(f"{self.url(replica)}/ready/", timeout=10)

    # -- agents' calls ------------------------------------------------------------------------
    async def call_async(
        self, tool: str, args: dict[str, Any], *, replica: int = 1, progress: list[Any] | None = None
    ) -> Any:
        """One tools/call through a replica, as an agent makes it; progress notifications go to ``progress``."""

        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            if progress is not None:
                progress.append((value, total, message))

        async with open_mcp_client(self.mcp_url(replica), self.token) as client:
            return await client.call_tool(tool, args, progress_callback=on_progress)

    def call(self, tool: str, args: dict[str, Any], **kwargs: Any) -> Any:
        return run(self.call_async(tool, args, **kwargs))

    def guard(self, guard_id: int, replica: int = 1) -> dict[str, Any]:
        """``zerto_checkpoint_status`` of one of the agent's guards (a failed one's too, whose answer is an error)."""
        return dict(self.call("zerto_checkpoint_status", {"id": guard_id}, replica=replica).structured_content)

    def start_guard(self, vm: str, action: str, **extra: Any) -> dict[str, Any]:
        """A guard asked for without waiting, once its checkpoints are inserted and wait to be listed
        (the poller's next round is then a message some worker holds)."""
        result = self.call("zerto_create_tagged_checkpoint", {"vm": vm, "action": action, "wait": False, **extra})
        assert not result.is_error, result.content
        out = dict(result.structured_content)
        self.wait_guard(out["id"], lambda g: any(v["status"] == "waiting" for v in g["vpgs"]))
        return out

    def in_background(self, tool: str, args: dict[str, Any], replica: int = 1) -> BackgroundCall:
        return BackgroundCall(self, tool, args, replica)

    def wait_guard(
        self, guard_id: int, condition: Callable[[dict[str, Any]], bool], timeout: float = 120.0, what: str = ""
    ) -> dict[str, Any]:
        """The guard's status once ``condition`` holds for it (a bound on a hang, not a speed check)."""

        def met() -> dict[str, Any] | None:
            status = self.guard(guard_id)
            return status if condition(status) else None

        return wait_until(met, timeout, what=what or f"guard {guard_id}'s condition", every=0.5)

    def guard_finished(self, guard_id: int, timeout: float = 120.0) -> dict[str, Any]:
        return self.wait_guard(guard_id, lambda g: bool(g["finished"]), timeout, f"the end of guard {guard_id}")

    # -- recoveries ---------------------------------------------------------------------------
    def recover(self, vm: str, path: str, change_id: str, replica: int = 1) -> int:
        """An agent's ``zerto_recover_file`` for ``change_id``'s checkpoint; the request's id."""
        args = {"vm": vm, "path": path, "change_id": change_id, "reason": "tests: undo the change"}
        result = self.call("zerto_recover_file", args, replica=replica)
        assert not result.is_error, result.content
        return int(result.structured_content["id"])

    def approver(self) -> requests.Session:
        """The demo approver signed in (``manage.py runstack`` printed the password), CSRF header set."""
        line = next(line for line in self.output().splitlines() if line.startswith("Demo approver:"))
        password = line.split("password", 1)[1].split()[0]
        http = requests.Session()
        login = f"{self.url()}/admin/login/"
        http.get(login, timeout=30)
        form = {"username": "approver", "password": password, "csrfmiddlewaretoken": http.cookies["csrftoken"]}
        signed_in = http.post(login, data=form, headers={"Referer": login}, timeout=30, allow_redirects=False)
        assert signed_in.status_code == 302, signed_in.text[-500:]
        http.headers.update({"X-CSRFToken": http.cookies["csrftoken"], "Referer": f"{self.url()}/admin/"})
        return http

    def approve(self, recovery_id: int, http: requests.Session | None = None, replica: int = 1) -> None:
        """Approve over REST, as the approver's browser would (through either replica)."""
        answer = (http or self.approver()).post(
            f"{self.url(replica)}/api/recoveries/{recovery_id}/approve/", timeout=60
        )
        assert answer.status_code == 200, answer.text

    def recovery(self, recovery_id: int) -> dict[str, Any]:
        return dict(self.call("zerto_recovery_status", {"id": recovery_id}).structured_content)

    def recovery_finished(self, recovery_id: int, timeout: float = 180.0) -> dict[str, Any]:
        def done() -> dict[str, Any] | None:
            out = self.recovery(recovery_id)
            return out if out["status"] in ("succeeded", "failed") else None

        return wait_until(done, timeout, what=f"the end of recovery {recovery_id}", every=0.5)

    def live_sessions(self) -> list[dict[str, Any]]:
        """The FLR sessions the simulated ZVMs hold mounted now (one being unmounted is on its way out)."""
        slugs = [site["slug"] for site in self.sim.state()["sites"]]
        return [s for slug in slugs for s in self.sim.sessions(slug) if s["status"] != "UnmountInProgress"]

    def guarded(self, vm: str, change_id: str) -> dict[str, Any]:
        """A guard of ``vm`` for ``change_id``, waited for; its answer (ok or not)."""
        args = {"vm": vm, "action": "tests", "change_id": change_id}
        return dict(self.call("zerto_create_tagged_checkpoint", args).structured_content)

    # -- the supervised processes ---------------------------------------------------------------
    def _marker(self, name: str) -> str:
        kind, _, index = name.partition("-")
        if kind == "web":
            return f"--port {self.port + int(index) - 1} "
        if kind == "worker":
            return f"-n worker{index}@"
        return {"beat": " beat ", "simulator": " zvmsim "}[name]

    def pid(self, name: str) -> int:
        """The pid of the supervised process ``name`` now (a direct child of runstack)."""
        marker = self._marker(name)
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                if int(stat.read_text().rsplit(")", 1)[1].split()[1]) != self.proc.pid:
                    continue
                cmdline = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except (OSError, ValueError, IndexError):
                continue
            if marker in cmdline + " ":
                return int(stat.parent.name)
        raise LookupError(f"no {name} under runstack now")

    def running(self, name: str) -> int | None:
        try:
            return self.pid(name)
        except LookupError:
            return None

    def kill(self, name: str) -> int:
        """SIGKILL the process (its own children are left to the supervisor); returns its pid."""
        pid = self.pid(name)
        os.kill(pid, signal.SIGKILL)
        return pid

    def wait_started_again(self, name: str, old_pid: int, timeout: float = 90.0) -> int:
        """The pid of ``name`` once runstack started it again, and it serves (a replica answers /health/)."""

        def started() -> int | None:
            pid = self.running(name)
            return pid if pid is not None and pid != old_pid else None

        pid = wait_until(started, timeout, what=f"{name} started again", every=0.2)
        if name.startswith("web-"):
            wait_until(lambda: self.answers(int(name.split("-")[1])), timeout, what=f"{name} answering", every=0.2)
        return pid

    def answers(self, replica: int) -> bool:
        try:
            return requests.get(f"{self.url(replica)}/health/", timeout=2).ok
        except requests.RequestException:
            return False

    def stop(self) -> None:
        if getattr(self, "proc", None) is not None:
            self.proc.stop(sig=signal.SIGINT, timeout=60)
        self.redis.stop()
        self.postgres.remove()


@pytest.fixture(scope="session")
def production_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProductionStack]:
    stack = ProductionStack(tmp_path_factory.mktemp("production"))
    try:
        yield stack
    finally:
        stack.stop()
