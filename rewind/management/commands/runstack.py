"""``make run``: the simulator, the web replicas, the Celery workers and beat, supervised as one foreground unit.

The production shape on one machine: ``--replicas`` uvicorn processes on consecutive ports (no
sticky routing: any replica answers any request), ``--celery-workers`` Celery workers and one
beat. A process that exits is started again with backoff while the others keep serving
(``rewind.supervisor``); Ctrl-C stops all of it.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import requests
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser

from rewind.lib.processes import START_TIMEOUT_S, Proc, ProcessError, port_free, stack_forget, stack_record
from rewind.supervisor import Service, Supervisor

# A clean stop takes a few seconds (Celery's warm shutdown, uvicorn's workers): past this, a
# demo's Ctrl-C should not keep anyone waiting for a task to end, so what is left is killed.
STOP_TIMEOUT_S = 10.0
WATCH_EVERY_S = 0.25


class Command(BaseCommand):
    help = "Run the stack in the foreground, supervised (a process that exits is started again); Ctrl-C stops it."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--port",
            type=int,
            default=settings.REWIND_PORT,
            help="the first replica's port; the others take the ports after it",
        )
        parser.add_argument("--sim-port", type=int, default=settings.REWIND_SIM_PORT)
        parser.add_argument(
            "--replicas", type=int, default=2, help="web replicas: uvicorn processes on their own ports"
        )
        parser.add_argument("--workers", type=int, default=1, help="uvicorn worker processes in each replica")
        parser.add_argument("--celery-workers", type=int, default=2, help="Celery worker processes")
        parser.add_argument("--concurrency", type=int, default=2, help="pool processes of each Celery worker")
        parser.add_argument("--no-sim", action="store_true", help="do not start the simulator (real ZVMs)")
        parser.add_argument("--sim-vms", type=int, default=200, help="filler VMs in the simulator's inventory")

    def handle(self, *args: Any, **options: Any) -> None:
        self.supervisor = Supervisor(self._spawn, self._say)
        self._spawning = self._stop_asked = self._stopping = False
        for name in ("replicas", "workers", "celery_workers", "concurrency"):
            if options[name] < 1:
                raise CommandError(f"--{name.replace('_', '-')} must be at least 1")
        ports = [options["port"] + i for i in range(options["replicas"])]
        for port in ports + ([] if options["no_sim"] else [options["sim_port"]]):
            if not port_free(port):
                raise CommandError(f"port {port} is already in use (set REWIND_PORT / REWIND_SIM_PORT)")
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            if not options["no_sim"]:
                sim_url, sim_ca = self._start_simulator(options["sim_port"], options["sim_vms"])
                call_command("demo_setup", sim_url=sim_url, ca_bundle=sim_ca)
            self._start_services(ports, options)
            bases = [f"http://127.0.0.1:{port}" for port in ports]
            for i, base in enumerate(bases, 1):
                self._wait_until_up(f"web replica {i}", f"{base}/health/", verify=True)
            # mcpconfig and demo, run beside the stack, give clients the address it serves.
            public = str(settings.REWIND_PUBLIC_URL) if settings.REWIND_PUBLIC_URL_CONFIGURED else bases[0]
            stack_record(settings.VAR_DIR, public)
            self._say(_banner(bases, None if options["no_sim"] else options["sim_port"]))
            self._watch()
        except _Stop:
            pass
        finally:
            stack_forget(settings.VAR_DIR)
            self._stop_all()
            # A Ctrl-C pressed again after everything stopped must not end this process with a
            # traceback on its way out: it is already leaving. Other signals as they were.
            for sig, handler in previous.items():
                signal.signal(sig, signal.SIG_IGN if sig == signal.SIGINT else handler)

    def _say(self, line: str) -> None:
        self.stdout.write(line)
        self.stdout.flush()

    def _spawn(self, service: Service) -> Proc:
        # A session of its own (Proc), so the terminal's Ctrl-C reaches only us and we stop the
        # children in order instead of all of them racing. Their output stays on the terminal.
        # Being in a session of its own, a child nobody lists here would outlive us: a signal
        # that comes while it starts waits until it is listed (``_on_signal``).
        self._spawning = True
        try:
            proc = service.proc = Proc(service.name, service.argv, cwd=settings.BASE_DIR, env=service.env)
        finally:
            self._spawning = False
        if self._stop_asked:
            raise _Stop()
        return proc

    def _start_simulator(self, port: int, vms: int) -> tuple[str, Path]:
        """The simulator's URL and its CA certificate, which it makes in ``cert_dir`` on its first run."""
        cert_dir = settings.VAR_DIR / "sim"
        cert_dir.mkdir(parents=True, exist_ok=True)
        self.supervisor.start(
            "simulator",
            [sys.executable, "-m", "zvmsim", "--port", str(port), "--cert-dir", str(cert_dir), "--vms", str(vms)],
        )
        url = f"https://127.0.0.1:{port}"
        ca = cert_dir / "ca.pem"
        # Verified against the simulator's own CA, as the demo sites are (demo_setup pins it).
        self._wait_until_up("the ZVM simulator", f"{url}/_sim/state", verify=ca)
        return url, ca

    def _wait_until_up(self, what: str, url: str, *, verify: bool | Path) -> None:
        def answers() -> bool:
            for other in self.supervisor.procs():
                if not other.running():
                    raise CommandError(f"{other.name} exited with code {other.returncode} while starting")
            if isinstance(verify, Path) and not verify.exists():
                time.sleep(0.15)  # the simulator has not written its certificates yet
                return False
            try:
                requests.get(
                    url, verify=str(verify) if isinstance(verify, Path) else verify, timeout=1
                ).raise_for_status()
            except requests.RequestException:
                time.sleep(0.15)  # a refused connection returns at once: do not spin
                return False
            return True

        try:
            # Any child would do: answers() itself watches every one of them.
            self.supervisor.procs()[-1].wait_until(answers, what="answering", timeout=START_TIMEOUT_S)
        except ProcessError:
            raise CommandError(f"{what} did not start within {START_TIMEOUT_S:.0f} s") from None

    def _start_services(self, ports: list[int], options: dict[str, Any]) -> None:
        python = sys.executable
        # Links handed to agents (approval pages, downloads) must point at this stack.
        public = (
            str(settings.REWIND_PUBLIC_URL) if settings.REWIND_PUBLIC_URL_CONFIGURED else f"http://127.0.0.1:{ports[0]}"
        )
        env = {**os.environ, "REWIND_PUBLIC_URL": public}
        for i, port in enumerate(ports, 1):
            uvicorn = [python, "-m", "uvicorn", "rewind.asgi:application", "--host", "127.0.0.1", "--port", str(port)]
            self.supervisor.start(f"web-{i}", [*uvicorn, "--workers", str(options["workers"]), "--no-access-log"], env)
        for i in range(1, options["celery_workers"] + 1):
            celery = [python, "-m", "celery", "-A", "rewind", "worker", "-n", f"worker{i}@%h"]
            self.supervisor.start(
                f"worker-{i}", [*celery, "-c", str(options["concurrency"]), "--loglevel", "INFO"], env
            )
        schedule = str(settings.VAR_DIR / "celerybeat-schedule")
        self.supervisor.start(
            "beat", [python, "-m", "celery", "-A", "rewind", "beat", "--loglevel", "INFO", "--schedule", schedule], env
        )

    def _watch(self) -> None:
        while True:
            self._spawning = True  # a restart lists its child before a signal is acted on
            try:
                self.supervisor.tend()
            finally:
                self._spawning = False
            if self._stop_asked:
                raise _Stop()
            time.sleep(WATCH_EVERY_S)

    def _on_signal(self, signum: int, frame: object) -> None:
        if self._stopping:
            # Asked again while the children stop: whoever asks will not wait for a clean
            # shutdown. Killed, never raised: raising here would end this process before its
            # children and leave them running in their own sessions.
            self._kill_children()
        elif self._spawning:
            self._stop_asked = True  # raised once the child being started is listed
        else:
            raise _Stop()

    def _kill_children(self) -> None:
        for proc in self.supervisor.procs():
            proc.send(signal.SIGKILL)  # to its whole group: its own children too

    def _stop_all(self) -> None:
        self._stopping = True
        left = [proc for proc in self.supervisor.procs() if proc.running()]
        if left:
            names = ", ".join(proc.name for proc in reversed(left))
            self._say(f"stopping {names} (at most {STOP_TIMEOUT_S:.0f} s; Ctrl-C again kills them now) ...")
        # Only each main process is asked: uvicorn and Celery stop their own children cleanly.
        # Whatever is left of any group after the bound is killed, so nothing outlives us.
        self.supervisor.stop(STOP_TIMEOUT_S)


def _banner(bases: list[str], sim_port: int | None) -> str:
    replicas = "\n".join(f"  web replica {i}  {base}/   (MCP {base}/mcp)" for i, base in enumerate(bases, 1))
    return (
        "\nzerto-rewind is running:\n"
        f"{replicas}\n"
        f"  admin          {bases[0]}/admin/\n"
        f"  MCP endpoint   {bases[0]}/mcp   (sign in with OAuth, or: python manage.py mcpconfig NAME)\n"
        f"  REST API       {bases[0]}/api/\n"
        + ("" if sim_port is None else f"  ZVM simulator  https://127.0.0.1:{sim_port}/_sim/state\n")
        + "Any replica answers any request. A process that exits is started again.\n"
        "Press Ctrl-C to stop everything.\n"
    )


class _Stop(Exception):
    pass
