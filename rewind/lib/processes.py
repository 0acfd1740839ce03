"""Child processes that start, say when they are ready, and stop together with their own children.

``runstack``, the benchmarks and the tests start the simulator, uvicorn and Celery this one way: each child in
a session of its own (Ctrl-C reaches only the parent, which stops them in order), its output in a log that
readiness checks read, and a stop that waits until no process of its group is left: uvicorn's and Celery's
children may outlive their leader, holding database connections. Needs no Django.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

START_TIMEOUT_S = 60.0
_POLL_S = 0.05


class ProcessError(RuntimeError):
    """A child exited while starting, or was not ready in time; the message ends with its log's tail."""


def group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs (a zombie waiting to be reaped does not)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state, _ppid, pgrp = stat.read_text().rsplit(")", 1)[1].split()[:3]
        except (OSError, ValueError):
            continue  # the process went away while we looked
        if int(pgrp) == pgid and state not in ("Z", "X"):
            return True
    return False


class Proc:
    """One child process in a session of its own, its stdout and stderr in ``log`` (appended with ``append``)."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        log: Path | None = None,
        env: Mapping[str, str] | None = None,
        cwd: Path | str | None = None,
        append: bool = False,
    ) -> None:
        self.name, self.log = name, log
        if log is None:
            self.popen = subprocess.Popen(list(argv), cwd=cwd, env=env, start_new_session=True)
            return
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab" if append else "wb") as out:  # the child keeps its own copy of the descriptor
            self.popen = subprocess.Popen(
                list(argv), cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def returncode(self) -> int | None:
        return self.popen.poll()

    def running(self) -> bool:
        """Whether the child itself still runs (its own children are not asked)."""
        return self.popen.poll() is None

    def output(self) -> str:
        """What the child has written to its log so far ("" without a log)."""
        return self.log.read_text(errors="replace") if self.log is not None and self.log.exists() else ""

    def _failure(self, what: str) -> ProcessError:
        return ProcessError(f"{self.name} {what}: {self.output()[-3000:]}")

    def wait_until(self, ready: Callable[[], bool], *, what: str = "ready", timeout: float = START_TIMEOUT_S) -> None:
        """Return once ``ready()`` is true; ProcessError if the child exits first or ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        while not ready():
            if not self.running():
                raise self._failure(f"exited with {self.popen.returncode} before it was {what}")
            if time.monotonic() > deadline:
                raise self._failure(f"not {what} after {timeout:.0f} s")
            time.sleep(_POLL_S)

    def wait_for_output(self, text: str, *, count: int = 1, timeout: float = START_TIMEOUT_S) -> str:
        """The log once ``text`` stands in it ``count`` times (see ``wait_until`` for failures)."""
        self.wait_until(
            lambda: self.output().count(text) >= count, what=f"ready ({text!r} in its log)", timeout=timeout
        )
        return self.output()

    def send(self, sig: int = signal.SIGTERM, *, group: bool = True) -> None:
        """Send ``sig`` to the child's whole group, or with ``group`` off to the child alone."""
        with contextlib.suppress(ProcessLookupError):
            if group:
                os.killpg(self.popen.pid, sig)
            else:
                self.popen.send_signal(sig)

    def gone(self) -> bool:
        """Whether the child has exited and no process of its group is left."""
        return self.popen.poll() is not None and not group_alive(self.popen.pid)

    def wait_gone(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not self.gone():
            if time.monotonic() > deadline:
                return False
            time.sleep(_POLL_S)
        return True

    def stop(self, *, sig: int = signal.SIGTERM, timeout: float = 20.0, group: bool = True) -> None:
        """Ask with ``sig`` (to the group, or with ``group`` off to the child alone, when it stops its own
        children), wait until the group is gone, and SIGKILL whatever is left after ``timeout``. Harmless to repeat."""
        if not self.gone():
            self.send(sig, group=group)
        self.kill_after(time.monotonic() + timeout)

    def kill(self, timeout: float = 30.0) -> None:
        """SIGKILL the child and its group at once (a crash, not a shutdown); returns once they are gone."""
        self.stop(sig=signal.SIGKILL, timeout=timeout)

    def cpu_seconds(self) -> float:
        """User + system CPU of the child's group so far (the child and its workers)."""
        tick = os.sysconf("SC_CLK_TCK")
        total = 0
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == self.popen.pid:  # field 5: process group id
                total += int(fields[11]) + int(fields[12])  # fields 14, 15: utime, stime
        return total / tick

    def children_peak_rss_kib(self) -> int:
        """The largest peak RSS (VmHWM) among the child's own children, e.g. a worker's pool processes."""
        peak = 0
        for status in Path("/proc").glob("[0-9]*/status"):
            try:
                lines = status.read_text().splitlines()
            except OSError:
                continue
            fields = dict(line.split(":", 1) for line in lines if ":" in line)
            if fields.get("PPid", "").strip() == str(self.popen.pid) and "VmHWM" in fields:
                peak = max(peak, int(fields["VmHWM"].split()[0]))
        return peak

    def kill_after(self, deadline: float) -> None:
        while not self.gone() and time.monotonic() < deadline:
            time.sleep(_POLL_S)
        if self.gone():
            return
        self.send(signal.SIGKILL)
        self.popen.wait()
        # SIGKILL cannot be ignored: the rest of the group follows within moments.
        self.wait_gone(10.0)


def stop_all(procs: Sequence[Proc], *, timeout: float = 15.0, group: bool = True) -> None:
    """Stop ``procs`` together, last started first: every one is asked before any is waited for,
    so their shutdowns overlap; whatever is left after ``timeout`` is killed."""
    for proc in reversed(procs):
        if not proc.gone():
            proc.send(signal.SIGTERM, group=group)
    deadline = time.monotonic() + timeout
    for proc in procs:
        proc.kill_after(deadline)


# What a running ``manage.py runstack`` serves, so commands run beside it (mcpconfig, demo) use its address.
STACK_FILE = "runstack.json"


def stack_record(var_dir: Path, url: str) -> None:
    """Note that this process serves the stack at ``url`` (under the state folder ``var_dir``)."""
    path = var_dir / STACK_FILE
    path.write_text(json.dumps({"url": url.rstrip("/"), "pid": os.getpid()}), encoding="utf-8")


def stack_forget(var_dir: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        (var_dir / STACK_FILE).unlink()


def running_stack_url(var_dir: Path) -> str | None:
    """The address of the stack running on ``var_dir``'s state, or None when none runs (a stale note is ignored)."""
    try:
        noted = json.loads((var_dir / STACK_FILE).read_text(encoding="utf-8"))
        os.kill(int(noted["pid"]), 0)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    url = noted.get("url")
    return url if isinstance(url, str) and url.startswith(("http://", "https://")) else None


def port_free(port: int) -> bool:
    """Whether nothing listens on ``port`` of 127.0.0.1 now (a server could take it)."""
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


# Ports are picked below the kernel's ephemeral range: a port of that range found free can be
# taken by any process's outgoing connection before our server binds it (seen under the
# parallel suite as "address already in use"); the kernel never hands out the ports below it.
LOWEST_PORT = 10_000
_random = random.SystemRandom()  # not the random module's state, which tests may seed


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768  # Linux's default; elsewhere the check below still holds


def _bindable(port: int) -> bool:
    """Whether a server could bind ``port`` of 127.0.0.1 now (as servers do, with SO_REUSEADDR)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A port of 127.0.0.1 a server could bind now, outside the range outgoing connections take."""
    return free_ports(1)


def free_ports(count: int) -> int:
    """A first port such that it and the ``count - 1`` after it are free now (runstack's replicas)."""
    top = _ephemeral_low() - count
    for _ in range(200):
        first = _random.randint(LOWEST_PORT, top) if top > LOWEST_PORT else _random.randint(1024, 65535 - count)
        if all(_bindable(first + i) for i in range(count)):  # a listener makes the bind fail too
            return first
    raise RuntimeError(f"found no {count} free consecutive ports")
