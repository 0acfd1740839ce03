"""Keep a set of child processes running: one that exits is started again, with backoff.

``runstack`` supervises its processes with it as systemd would in production (``Restart=always``): one that
dies is started again while the others keep serving. The backoff doubles from ``FIRST_BACKOFF_S`` up to
``MAX_BACKOFF_S`` (back to the first once a process stayed up ``STABLE_AFTER_S``), so a process that exits at
once every time costs a line every half minute, never a busy loop. Needs no Django.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from rewind.lib.processes import Proc, stop_all

FIRST_BACKOFF_S = 1.0
MAX_BACKOFF_S = 30.0
STABLE_AFTER_S = 60.0


@dataclass
class Service:
    """One supervised process: how to start it, and its current run."""

    name: str
    argv: Sequence[str]
    env: Mapping[str, str] | None = None
    proc: Proc | None = None
    started_at: float = 0.0
    restarts: int = 0
    backoff_s: float = FIRST_BACKOFF_S
    restart_at: float | None = field(default=None)  # monotonic; set while it waits to be started again

    def running(self) -> bool:
        return self.proc is not None and self.proc.running()


class Supervisor:
    """Starts services and, on every ``tend()``, restarts those that exited once their backoff passed.

    ``spawn`` starts one process (runstack's keeps signals out while a child is being listed);
    ``say`` prints a line for the operator; ``clock`` is monotonic seconds.
    """

    def __init__(
        self, spawn: Callable[[Service], Proc], say: Callable[[str], None], clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.services: list[Service] = []
        self._spawn = spawn
        self._say = say
        self._clock = clock
        self._stopping = False

    def start(self, name: str, argv: Sequence[str], env: Mapping[str, str] | None = None) -> Service:
        service = Service(name, list(argv), env)
        self.services.append(service)
        self._run(service)
        return service

    def procs(self) -> list[Proc]:
        return [s.proc for s in self.services if s.proc is not None]

    def tend(self) -> None:
        """Notice the services that exited and start again those whose backoff has passed."""
        if self._stopping:
            return
        now = self._clock()
        for service in self.services:
            if service.restart_at is None and not service.running():
                self._exited(service, now)
            if service.restart_at is not None and now >= service.restart_at:
                self._run(service)

    def _exited(self, service: Service, now: float) -> None:
        assert service.proc is not None
        code = service.proc.returncode
        # Its own children may outlive it (a SIGKILLed uvicorn or Celery parent): they hold its
        # port and its database connections, so they go before it starts again.
        service.proc.stop(timeout=5)
        if now - service.started_at >= STABLE_AFTER_S:
            service.backoff_s = FIRST_BACKOFF_S
        service.restart_at = now + service.backoff_s
        self._say(f"{service.name} exited with code {code}; starting it again in {service.backoff_s:.0f} s")
        service.backoff_s = min(MAX_BACKOFF_S, service.backoff_s * 2)

    def _run(self, service: Service) -> None:
        again = service.restart_at is not None
        service.restart_at = None
        service.started_at = self._clock()
        service.proc = self._spawn(service)
        if again:
            service.restarts += 1
            self._say(f"{service.name} started again (pid {service.proc.pid}, restart {service.restarts})")

    def stop(self, timeout: float) -> None:
        """Stop every service, last started first (``rewind.lib.processes.stop_all``); none is started again."""
        self._stopping = True
        for service in self.services:
            service.restart_at = None
        stop_all(self.procs(), timeout=timeout, group=False)
