"""pytest plugin: real third-party MCP servers, and two of our own on other SDKs, as upstreams.

Everything here is installed by ``make upstreams`` (``make test`` runs it) from the pins in
tests/upstreams/: the Python SDK 1.x and 2.x virtualenvs under var/upstreams/, and the npm
packages (Node 22 among them) under tests/upstreams/node_modules. A fixture whose install is
missing skips, naming that target. Nothing is installed from a test.

HTTP servers, shared by the session (each fixture of a pair: ``<name>_server`` for the session,
``<name>`` per test, which starts it again if a test left it stopped and empties its record), yield
an :class:`HttpUpstream`: ``.url``, ``.headers`` (what a client must send), ``.stop()``,
``.start_again()`` (the same port, every session forgotten), ``.kill()``, ``.calls()``:

- ``everything_http``: @modelcontextprotocol/server-everything, streamable HTTP, stateful, no auth
  (it keeps no record: ``calls()`` raises);
- ``sdk1_stateful_http`` / ``sdk1_stateless_http``: tests/upstreams/sdk1_server.py on the SDK 1.x;
- ``fastmcp_http``: tests/upstreams/fastmcp_server.py on fastmcp 4.x (stateful).

Ours require a bearer token (``.headers``) and act on ``.files / <host> / <path>``.

Stdio servers (per test; nothing started until a client runs ``.command``) yield a
:class:`StdioUpstream`: ``.command`` (argv), ``.env`` (only what the server needs), ``.cwd``,
``.workdir`` (where its effects land) and ``.params()`` for ``mcp.client.stdio``:

- ``everything_stdio``: server-everything over stdio;
- ``filesystem_stdio``: @modelcontextprotocol/server-filesystem allowed ``.workdir`` only;
- ``git_sdk1_stdio`` / ``git_sdk2_stdio``: mcp-server-git on the SDK 1.x / 2.x, on a fresh
  repository at ``.workdir`` with one commit;
- ``ssh_mcp_stdio``: ssh-mcp (an :class:`SshMcpUpstream`, ``.host`` the :class:`SshHost`) reaching
  the session's ``ssh_host``, a real sshd on a loopback port (tests.sshhost); ``.workdir`` is
  the login's folder on that host.

``conformance_suites`` skips unless the official conformance suites are installed (tests.conformance
runs them under Node, so it marks a test ``node``).

Every fixture here that starts a process, or yields a command that does, is in
tests.markers.PROCESS_FIXTURES.
"""

from __future__ import annotations

import json
import secrets
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from rewind.lib.processes import Proc, ProcessError, free_port
from tests.conformance import ALPHA, NODE, STABLE, UPSTREAMS
from tests.simfixtures import REPO
from tests.sshhost import SSHD, SSHD_INSTALL, SshHost, run_ssh_host, ssh_mcp_config

if TYPE_CHECKING:
    from mcp.client.stdio import StdioServerParameters

NODE_MODULES = UPSTREAMS / "node_modules"
PY1 = REPO / "var" / "upstreams" / "py1" / "bin"
PY2 = REPO / "var" / "upstreams" / "py2" / "bin"
INSTALL = "make upstreams"
EVERYTHING = NODE_MODULES / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
FILESYSTEM = NODE_MODULES / "@modelcontextprotocol" / "server-filesystem" / "dist" / "index.js"
SSH_MCP = NODE_MODULES / "ssh-mcp" / "build" / "index.js"
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
START_TIMEOUT = 60.0


def installed(*paths: Path) -> None:
    """Skip the test unless every one of ``paths`` exists, naming the target that installs them."""
    missing = [str(p.relative_to(REPO)) for p in paths if not p.exists()]
    if missing:
        pytest.skip(f"the upstream servers are not installed ({', '.join(missing)} missing): run `{INSTALL}`")


def read_calls(record: Path) -> list[dict[str, Any]]:
    if not record.exists():
        return []
    return [json.loads(line) for line in record.read_text(encoding="utf-8").splitlines() if line.strip()]


@dataclass
class HttpUpstream:
    """A server of streamable HTTP at ``url``, started and stopped by the tests."""

    name: str
    url: str
    headers: dict[str, str]
    proc: Proc
    argv: list[str]
    env: dict[str, str]
    ready: str
    record: Path | None = None
    files: Path | None = None

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1].split("/", 1)[0])

    def running(self) -> bool:
        return self.proc.running()

    def calls(self) -> list[dict[str, Any]]:
        """The ``tools/call`` requests it received, oldest first (hostadmin.CallRecord's lines)."""
        if self.record is None:
            raise RuntimeError(f"{self.name} keeps no record of the calls it receives")
        return read_calls(self.record)

    def clear(self) -> None:
        if self.record is not None:
            self.record.write_text("", encoding="utf-8")

    def stop(self) -> None:
        self.proc.stop(timeout=10)

    def kill(self) -> None:
        """SIGKILL: a crash, not a shutdown."""
        self.proc.kill()

    def start_again(self) -> None:
        """Start it again on the same port (after ``stop`` or ``kill``): it remembers no session."""
        assert self.proc.log is not None
        self.proc = _launch(self.name, self.argv, self.env, self.proc.log, self.ready)


def _launch(name: str, argv: list[str], env: dict[str, str], log: Path, ready: str) -> Proc:
    earlier = log.read_text(errors="replace").count(ready) if log.exists() else 0  # one log for every start
    proc = Proc(name, argv, log=log, env=env, cwd=log.parent, append=True)
    try:
        proc.wait_for_output(ready, count=earlier + 1, timeout=START_TIMEOUT)
    except ProcessError:
        proc.kill()
        raise
    return proc


def start_everything_http(work_dir: Path) -> HttpUpstream:
    """server-everything's streamable HTTP transport; it takes its port from ``PORT``."""
    installed(NODE, EVERYTHING)
    work_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = {"PATH": SYSTEM_PATH, "HOME": str(work_dir), "PORT": str(port)}
    argv = [str(NODE), str(EVERYTHING), "streamableHttp"]
    ready = f"listening on port {port}"
    proc = _launch("server-everything", argv, env, work_dir / "server-everything.log", ready)
    return HttpUpstream("server-everything", f"http://127.0.0.1:{port}/mcp", {}, proc, argv, env, ready)


def start_our_server(work_dir: Path, python: Path, script: str, *options: str) -> HttpUpstream:
    """tests/upstreams/``script`` under ``python``, with a token, a record and a folder of files."""
    installed(python)
    work_dir.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(24)
    token_file = work_dir / "token"
    token_file.write_text(token, encoding="utf-8")
    token_file.chmod(0o600)
    record, files, port = work_dir / "calls.jsonl", work_dir / "files", free_port()
    record.write_text("", encoding="utf-8")
    argv = [str(python), str(UPSTREAMS / script), "--files", str(files), "--record", str(record)]
    argv += ["--token-file", str(token_file), "--port", str(port), *options]
    env = {"PATH": SYSTEM_PATH, "HOME": str(work_dir)}
    name = script.removesuffix(".py").replace("_", "-")
    ready = f"ready on http://127.0.0.1:{port}/mcp"
    proc = _launch(name, argv, env, work_dir / f"{name}.log", ready)
    url = f"http://127.0.0.1:{port}/mcp"
    return HttpUpstream(name, url, {"Authorization": f"Bearer {token}"}, proc, argv, env, ready, record, files)


def _serve(upstream: HttpUpstream) -> Iterator[HttpUpstream]:
    try:
        yield upstream
    finally:
        upstream.stop()


def _fresh(upstream: HttpUpstream) -> HttpUpstream:
    """The session's server for one test: running (a test before may have stopped it), its record empty."""
    if not upstream.running():
        upstream.start_again()
    upstream.clear()
    return upstream


@pytest.fixture(scope="session")
def everything_http_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpUpstream]:
    yield from _serve(start_everything_http(tmp_path_factory.mktemp("everything-http")))


@pytest.fixture
def everything_http(everything_http_server: HttpUpstream) -> HttpUpstream:
    return _fresh(everything_http_server)


@pytest.fixture(scope="session")
def sdk1_stateful_http_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpUpstream]:
    work_dir = tmp_path_factory.mktemp("sdk1-stateful")
    yield from _serve(start_our_server(work_dir, PY1 / "python", "sdk1_server.py", "--stateful"))


@pytest.fixture
def sdk1_stateful_http(sdk1_stateful_http_server: HttpUpstream) -> HttpUpstream:
    return _fresh(sdk1_stateful_http_server)


@pytest.fixture(scope="session")
def sdk1_stateless_http_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpUpstream]:
    work_dir = tmp_path_factory.mktemp("sdk1-stateless")
    yield from _serve(start_our_server(work_dir, PY1 / "python", "sdk1_server.py", "--stateless"))


@pytest.fixture
def sdk1_stateless_http(sdk1_stateless_http_server: HttpUpstream) -> HttpUpstream:
    return _fresh(sdk1_stateless_http_server)


@pytest.fixture(scope="session")
def fastmcp_http_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpUpstream]:
    work_dir = tmp_path_factory.mktemp("fastmcp")
    yield from _serve(start_our_server(work_dir, PY2 / "python", "fastmcp_server.py", "--stateful"))


@pytest.fixture
def fastmcp_http(fastmcp_http_server: HttpUpstream) -> HttpUpstream:
    return _fresh(fastmcp_http_server)


@dataclass
class StdioUpstream:
    """How to launch a stdio server: ``command`` (argv), ``env`` (only what it needs), ``cwd``.

    ``workdir`` is where its effects land (the folder it serves, a repository, a host's folder).
    """

    name: str
    command: list[str]
    env: dict[str, str]
    cwd: Path
    workdir: Path

    def params(self) -> StdioServerParameters:
        """The command as the SDK's client takes it (``mcp.client.stdio.stdio_client``)."""
        from mcp.client.stdio import StdioServerParameters

        return StdioServerParameters(command=self.command[0], args=self.command[1:], env=self.env, cwd=self.cwd)

    def pids(self) -> list[int]:
        """The processes running this command now, in ``cwd`` (a client's child; a script's interpreter
        stands before its command), so a test can kill one as a crash would."""
        found = []
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                argv = proc.joinpath("cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
                if argv[-len(self.command) :] == self.command and proc.joinpath("cwd").resolve() == self.cwd.resolve():
                    found.append(int(proc.name))
            except OSError:
                continue  # it went away while we looked
        return found


@dataclass
class SshMcpUpstream(StdioUpstream):
    """ssh-mcp reaching ``host``; its one profile is named ``lab``, ``workdir`` the login's folder there."""

    host: SshHost = field(kw_only=True)


@pytest.fixture
def everything_stdio(tmp_path: Path) -> StdioUpstream:
    installed(NODE, EVERYTHING)
    command = [str(NODE), str(EVERYTHING), "stdio"]
    return StdioUpstream("server-everything", command, {"HOME": str(tmp_path)}, tmp_path, tmp_path)


@pytest.fixture
def filesystem_stdio(tmp_path: Path) -> StdioUpstream:
    """server-filesystem allowed one folder, ``workdir`` (clients without roots keep it so)."""
    installed(NODE, FILESYSTEM)
    workdir = tmp_path / "served"
    workdir.mkdir()
    command = [str(NODE), str(FILESYSTEM), str(workdir)]
    return StdioUpstream("server-filesystem", command, {"HOME": str(tmp_path)}, tmp_path, workdir)


def git_repository(path: Path) -> Path:
    """A repository at ``path`` with one commit of ``README.md``, its author set in its own config."""
    path.mkdir(parents=True)
    (path / "README.md").write_text("# lab\n", encoding="utf-8")
    env = {"PATH": SYSTEM_PATH, "HOME": str(path.parent), "GIT_CONFIG_NOSYSTEM": "1"}
    for args in (
        ["init", "-q", "-b", "main"],
        ["config", "user.name", "Rewind Tests"],
        ["config", "user.email", "tests@rewind.invalid"],
        ["add", "README.md"],
        ["commit", "-q", "-m", "first"],
    ):
        subprocess.run(["git", *args], cwd=path, env=env, check=True, capture_output=True)
    return path


def _git_server(bin_dir: Path, tmp_path: Path, name: str) -> StdioUpstream:
    server = bin_dir / "mcp-server-git"
    installed(server)
    repo = git_repository(tmp_path / "repo")
    env = {"PATH": SYSTEM_PATH, "HOME": str(tmp_path)}  # GitPython runs the git on PATH
    return StdioUpstream(name, [str(server), "--repository", str(repo)], env, tmp_path, repo)


@pytest.fixture
def git_sdk1_stdio(tmp_path: Path) -> StdioUpstream:
    return _git_server(PY1, tmp_path, "mcp-server-git (SDK 1.x)")


@pytest.fixture
def git_sdk2_stdio(tmp_path: Path) -> StdioUpstream:
    return _git_server(PY2, tmp_path, "mcp-server-git (SDK 2.x)")


@pytest.fixture(scope="session")
def ssh_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshHost]:
    """A real sshd on a loopback port (tests.sshhost), shared by the session."""
    if not SSHD.exists():
        pytest.skip(f"OpenSSH's server is not installed: {SSHD_INSTALL}")
    with run_ssh_host(tmp_path_factory.mktemp("sshd")) as host:
        yield host


@pytest.fixture
def ssh_mcp_stdio(ssh_host: SshHost, tmp_path: Path) -> SshMcpUpstream:
    """ssh-mcp with a config of its own that reaches ``ssh_host`` with the login's key.

    Its environment holds no ``SSH_AUTH_SOCK``: ssh-mcp would try an agent's keys first.
    Its audit log goes under ``tmp_path``.
    """
    installed(NODE, SSH_MCP)
    if not ssh_host.proc.running():
        ssh_host.start_again()  # a test before stopped it
    config = ssh_mcp_config(ssh_host, tmp_path / "ssh-mcp")
    env = {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path / "data")}
    command = [str(NODE), str(SSH_MCP), f"--config={config}"]
    return SshMcpUpstream("ssh-mcp", command, env, tmp_path, ssh_host.workdir, host=ssh_host)


@pytest.fixture(scope="session")
def conformance_suites() -> None:
    """Skips unless the conformance suites and their Node 22 are installed (tests.conformance runs them)."""
    installed(NODE, STABLE, ALPHA)
