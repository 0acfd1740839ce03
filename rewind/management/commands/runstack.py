"""``make run``: the simulator, the web server, a Celery worker and beat, as one foreground unit."""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

import requests
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser

from rewind.processes import START_TIMEOUT_S, Proc, ProcessError, stack_forget, stack_record, stop_all

# A clean stop takes a few seconds (Celery's warm shutdown, uvicorn's workers): past this, a
# demo's Ctrl-C should not keep anyone waiting for a task to end, so what is left is killed.
STOP_TIMEOUT_S = 10.0


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


class Command(BaseCommand):
    help = "Run the demo stack in the foreground; Ctrl-C stops all of it."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--port", type=int, default=int(os.environ.get("REWIND_PORT", "8000")))
        parser.add_argument("--sim-port", type=int, default=int(os.environ.get("REWIND_SIM_PORT", "9443")))
        parser.add_argument("--workers", type=int, default=2, help="uvicorn worker processes")
        parser.add_argument("--no-sim", action="store_true", help="do not start the simulator (real ZVMs)")

    def handle(self, *args: Any, **options: Any) -> None:
        self.children: list[Proc] = []
        self._spawning = self._stop_asked = self._stopping = False
        for port in (options["port"],) + (() if options["no_sim"] else (options["sim_port"],)):
            if not _port_free(port):
                raise CommandError(f"port {port} is already in use (set REWIND_PORT / REWIND_SIM_PORT)")
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            if not options["no_sim"]:
                sim_url, sim_ca = self._start_simulator(options["sim_port"])
                call_command("demo_setup", sim_url=sim_url, ca_bundle=sim_ca)
            self._start_services(options["port"], options["workers"])
            base = f"http://127.0.0.1:{options['port']}"
            self._wait_until_up("the web server", f"{base}/health/", verify=True)
            stack_record(settings.VAR_DIR, os.environ.get("REWIND_PUBLIC_URL") or base)  # for mcpconfig and demo
            self.stdout.write(
                "\nzerto-rewind is running:\n"
                f"  admin         {base}/admin/\n"
                f"  MCP endpoint  {base}/mcp   (sign in with OAuth, or: python manage.py mcpconfig NAME)\n"
                f"  REST API      {base}/api/\n"
                + ("" if options["no_sim"] else f"  ZVM simulator https://127.0.0.1:{options['sim_port']}/_sim/state\n")
                + "Press Ctrl-C to stop everything.\n"
            )
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

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Proc:
        # A session of its own (Proc), so the terminal's Ctrl-C reaches only us and we stop the
        # children in order instead of all of them racing. Their output stays on the terminal.
        # Being in a session of its own, a child nobody lists here would outlive us: a signal
        # that comes while it starts waits until it is listed (``_on_signal``).
        self._spawning = True
        try:
            proc = Proc(name, argv, cwd=settings.BASE_DIR, env=env)
            self.children.append(proc)
        finally:
            self._spawning = False
        if self._stop_asked:
            raise _Stop()
        return proc

    def _start_simulator(self, port: int) -> tuple[str, Path]:
        """The simulator's URL and its CA certificate, which it makes in ``cert_dir`` on its first run."""
        cert_dir = settings.VAR_DIR / "sim"
        cert_dir.mkdir(parents=True, exist_ok=True)
        self._spawn(
            "simulator",
            [sys.executable, "-m", "zvmsim", "--port", str(port), "--cert-dir", str(cert_dir), "--vms", "200"],
        )
        url = f"https://127.0.0.1:{port}"
        ca = cert_dir / "ca.pem"
        # Verified against the simulator's own CA, as the demo sites are (demo_setup pins it).
        self._wait_until_up("the ZVM simulator", f"{url}/_sim/state", verify=ca)
        return url, ca

    def _wait_until_up(self, what: str, url: str, *, verify: bool | Path) -> None:
        def answers() -> bool:
            for other in self.children:
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
            self.children[-1].wait_until(answers, what="answering", timeout=START_TIMEOUT_S)
        except ProcessError:
            raise CommandError(f"{what} did not start within {START_TIMEOUT_S:.0f} s") from None

    def _start_services(self, port: int, workers: int) -> None:
        python = sys.executable
        # Links handed to agents (approval pages, downloads) must point at this server.
        env = {**os.environ, "REWIND_PUBLIC_URL": os.environ.get("REWIND_PUBLIC_URL") or f"http://127.0.0.1:{port}"}
        self._spawn(
            "web",
            [
                python,
                "-m",
                "uvicorn",
                "rewind.asgi:application",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--workers",
                str(workers),
                "--no-access-log",
            ],
            env,
        )
        self._spawn("worker", [python, "-m", "celery", "-A", "rewind", "worker", "-c", "4", "--loglevel", "INFO"], env)
        self._spawn(
            "beat",
            [
                python,
                "-m",
                "celery",
                "-A",
                "rewind",
                "beat",
                "--loglevel",
                "INFO",
                "--schedule",
                str(settings.VAR_DIR / "celerybeat-schedule"),
            ],
            env,
        )

    def _watch(self) -> None:
        while True:
            for proc in self.children:
                if not proc.running():
                    raise CommandError(f"{proc.name} exited with code {proc.returncode}; stopping the rest")
            time.sleep(0.5)

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
        for proc in self.children:
            proc.send(signal.SIGKILL)  # to its whole group: its own children too

    def _stop_all(self) -> None:
        self._stopping = True
        left = [proc for proc in self.children if proc.running()]
        if left:
            names = ", ".join(proc.name for proc in reversed(left))
            self.stdout.write(f"stopping {names} (at most {STOP_TIMEOUT_S:.0f} s; Ctrl-C again kills them now) ...")
        # Only each main process is asked: uvicorn and Celery stop their own children cleanly.
        # Whatever is left of any group after the bound is killed, so nothing outlives us.
        stop_all(self.children, timeout=STOP_TIMEOUT_S, group=False)
        self.children.clear()


class _Stop(Exception):
    pass
