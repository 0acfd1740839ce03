"""The supervisor behind ``manage.py runstack`` (rewind/supervisor.py): restarts with backoff.

Its processes are stand-ins here (what it asks of a process: is it running, its exit code,
stop what is left of it); the real ones are killed in tests/management/test_runstack_supervised.py.
"""

from __future__ import annotations

from typing import Any, cast

from rewind.lib.processes import Proc
from rewind.supervisor import FIRST_BACKOFF_S, MAX_BACKOFF_S, STABLE_AFTER_S, Service, Supervisor


class FakeProc:
    pids = iter(range(1000, 2000))

    def __init__(self) -> None:
        self.pid = next(self.pids)
        self.returncode: int | None = None
        self.stopped = False

    def running(self) -> bool:
        return self.returncode is None

    def stop(self, **kwargs: Any) -> None:
        self.stopped = True


class Recorder:
    def __init__(self) -> None:
        self.started: list[FakeProc] = []
        self.said: list[str] = []
        self.now = 0.0

    def spawn(self, service: Service) -> Proc:
        proc = FakeProc()
        self.started.append(proc)
        return cast(Proc, proc)


def _supervisor() -> tuple[Supervisor, Recorder]:
    recorder = Recorder()
    return Supervisor(recorder.spawn, recorder.said.append, clock=lambda: recorder.now), recorder


def test_it_starts_a_process_that_exited_again_after_its_backoff_and_leaves_the_others() -> None:
    supervisor, rec = _supervisor()
    web = supervisor.start("web-1", ["uvicorn"])
    worker = supervisor.start("worker-1", ["celery"])
    first_worker = rec.started[1]
    first_worker.returncode = -9
    rec.now = 100.0
    supervisor.tend()
    assert first_worker.stopped  # what is left of its group goes first
    assert rec.said == [f"worker-1 exited with code -9; starting it again in {FIRST_BACKOFF_S:.0f} s"]
    assert len(rec.started) == 2  # not before its backoff
    rec.now += FIRST_BACKOFF_S
    supervisor.tend()
    assert len(rec.started) == 3
    assert worker.proc is cast(Proc, rec.started[2])
    assert worker.restarts == 1
    assert web.proc is cast(Proc, rec.started[0])
    assert web.restarts == 0
    assert rec.said[-1] == f"worker-1 started again (pid {rec.started[2].pid}, restart 1)"


def test_the_backoff_doubles_up_to_its_bound_and_starts_over_once_the_process_stayed_up() -> None:
    supervisor, rec = _supervisor()
    service = supervisor.start("beat", ["celery", "beat"])
    waits = []
    for _ in range(8):  # a process that exits at once every time
        rec.started[-1].returncode = 1
        supervisor.tend()
        assert service.restart_at is not None
        waits.append(service.restart_at - rec.now)
        rec.now = service.restart_at
        supervisor.tend()
    assert waits == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    assert max(waits) == MAX_BACKOFF_S
    # One that stayed up long enough is started again after the first backoff.
    rec.started[-1].returncode = 0
    rec.now += STABLE_AFTER_S + 1
    supervisor.tend()
    assert service.restart_at == rec.now + FIRST_BACKOFF_S


def test_a_stopping_supervisor_starts_nothing_again(monkeypatch: Any) -> None:
    supervisor, rec = _supervisor()
    supervisor.start("web-1", ["uvicorn"])
    rec.started[0].returncode = -15
    rec.now = 10.0
    supervisor.tend()
    stopped: list[list[Proc]] = []
    monkeypatch.setattr("rewind.supervisor.stop_all", lambda procs, **kw: stopped.append(list(procs)))
    supervisor.stop(timeout=1)
    for now in (1000.0, 2000.0):
        rec.now = now
        supervisor.tend()
    assert len(rec.started) == 1
    assert stopped == [[cast(Proc, rec.started[0])]]
