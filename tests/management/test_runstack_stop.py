"""``manage.py runstack`` leaves no process behind: after Ctrl-C every descendant is gone.

Its children run in sessions of their own (so the terminal's Ctrl-C reaches only runstack),
which also means nothing but runstack stops them: a child it did not stop would run on.
Descendants are found through /proc (each process's parent), collected while the stack runs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

from rewind.lib.processes import Proc, free_port, free_ports
from tests.fixtures import wait_until

pytestmark = pytest.mark.process

GONE_WITHIN_S = 60.0  # generous: runstack's own bound is 10 s, then it kills what is left


def _parents() -> dict[int, int]:
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError):
            continue  # gone while we looked
    return parents


def _descendants(root: int) -> set[int]:
    parents = _parents()
    found: set[int] = set()
    todo = [root]
    while todo:
        pid = todo.pop()
        children = [child for child, parent in parents.items() if parent == pid]
        found.update(children)
        todo.extend(children)
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")  # a zombie has stopped; only its reaping is left


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:120]
    except OSError:
        return "?"


def _start(tmp_path: Path) -> Proc:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(REWIND_VAR_DIR=str(tmp_path / "var"), REWIND_PORT=str(free_ports(2)), REWIND_SIM_PORT=str(free_port()))
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v0"], cwd=settings.BASE_DIR, env=env, check=True, timeout=120
    )
    return Proc(
        "runstack",
        [sys.executable, "manage.py", "runstack"],
        log=tmp_path / "run.log",
        cwd=settings.BASE_DIR,
        env=env,
    )


def _watch_until(proc: Proc, text: str, seen: set[int]) -> None:
    """Collect the stack's descendants until ``text`` stands in its output (they come and go)."""

    def said() -> bool:
        seen.update(_descendants(proc.pid))
        if text in proc.output():
            return True
        assert proc.running(), proc.output()[-3000:]
        return False

    wait_until(said, 120, what=lambda: f"{text!r} in the output: {proc.output()[-3000:]}")


def _left(proc: Proc, seen: set[int]) -> dict[int, str]:
    left = {pid: _cmdline(pid) for pid in seen if _alive(pid)}
    return {proc.pid: "runstack", **left} if proc.running() else left


def _assert_all_gone(proc: Proc, seen: set[int]) -> None:
    wait_until(
        lambda: not proc.running() and not any(_alive(pid) for pid in seen),
        GONE_WITHIN_S,
        what=lambda: f"runstack and every descendant gone (left: {_left(proc, seen)}): {proc.output()[-3000:]}",
        every=0.1,
    )
    assert proc.returncode == 0, proc.output()[-3000:]
    assert "Traceback" not in proc.output()


@pytest.mark.parametrize(
    ("when", "signals"),
    [
        ("Press Ctrl-C", 1),  # running: the stop a newcomer makes
        ("Press Ctrl-C", 2),  # impatient: Ctrl-C again while the children stop
        ("Demo admin:", 1),  # still starting: the simulator up, the services not yet
    ],
)
def test_it_leaves_no_descendant_running_after_ctrl_c(tmp_path: Path, when: str, signals: int) -> None:
    proc = _start(tmp_path)
    seen: set[int] = set()
    try:
        _watch_until(proc, when, seen)
        assert seen, "runstack started no child"
        proc.send(signal.SIGINT, group=False)  # what the terminal sends on Ctrl-C
        for _ in range(signals - 1):
            # Again once it says it stops the children: the impatient second Ctrl-C.
            wait_until(
                lambda: "Ctrl-C again kills them now" in proc.output(), 60, what="runstack stopping its children"
            )
            proc.send(signal.SIGINT, group=False)
        _assert_all_gone(proc, seen)
    finally:
        proc.kill()
        for pid in seen:  # should there be any left, the next tests must not inherit them
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
