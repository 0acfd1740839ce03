"""What the benchmarks share: a throwaway state, the simulator, a Celery worker, sites, processes.

Every benchmark works on its own state folder under ``var/`` (SQLite + filesystem broker,
whatever DATABASE_URL or REDIS_URL say), so a run never touches a configured database and
never shares a broker with a running service. Every process it starts is a :class:`Proc`:
in a session of its own (it and its children stop together), its output in a log file in
the state folder, stopped at the end by the benchmark.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import requests

    from rewind.models import Site

REPO = Path(__file__).resolve().parent.parent
_VENV_PYTHON = REPO / ".venv" / "bin" / "python"
PYTHON = str(_VENV_PYTHON) if _VENV_PYTHON.exists() else sys.executable
START_TIMEOUT = 60.0
SIM_READY = "zvmsim ready on "
SITE_NAMES = {"site-a": "Site A", "site-b": "Site B", "site-c": "Site C"}


class Proc:
    """A subprocess in its own session, its stdout and stderr in ``log``."""

    def __init__(self, name: str, cmd: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.name, self.log = name, log
        with log.open("wb") as out:  # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen(
                cmd,
                cwd=REPO,
                env=env if env is not None else {**os.environ},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait_for(self, text: str, count: int = 1) -> str:
        """The log once ``text`` stands in it ``count`` times; RuntimeError if the process exits first."""
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            content = self.log.read_text(errors="replace")
            if content.count(text) >= count:
                return content
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited: {content[-2000:]}")
            time.sleep(0.1)
        raise RuntimeError(f"{self.name} not ready after {START_TIMEOUT:.0f} s: {self.log}")

    def cpu_seconds(self) -> float:
        """User + system CPU of this process group so far (the process and its workers)."""
        tick = os.sysconf("SC_CLK_TCK")
        total = 0
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == self.proc.pid:  # field 5: process group id
                total += int(fields[11]) + int(fields[12])  # fields 14, 15: utime, stime
        return total / tick

    def children_peak_rss_kib(self) -> int:
        """The largest peak RSS (VmHWM) among the direct children, e.g. a worker's pool processes."""
        peak = 0
        for status in Path("/proc").glob("[0-9]*/status"):
            try:
                lines = status.read_text().splitlines()
            except OSError:
                continue
            fields = dict(line.split(":", 1) for line in lines if ":" in line)
            if fields.get("PPid", "").strip() == str(self.proc.pid) and "VmHWM" in fields:
                peak = max(peak, int(fields["VmHWM"].split()[0]))
        return peak

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM to the whole group, SIGKILL after ``timeout`` seconds."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def fresh_dir(path: Path) -> Path:
    """``path`` emptied (the last run's state and logs go) and created."""
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def django_setup(var_dir: Path, **env: str) -> None:
    """Set Django up in this process on ``var_dir`` (SQLite + filesystem broker) and migrate.

    ``env`` adds settings (e.g. ``REWIND_LOOKUP_CACHE_S="0"``); they are put in ``os.environ``
    first, so the processes started afterwards (worker, servers) run with the same ones.
    """
    os.environ["REWIND_VAR_DIR"] = str(var_dir)
    for name in ("DATABASE_URL", "REDIS_URL"):
        os.environ.pop(name, None)
    os.environ.update(env)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "rewind.settings")
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", interactive=False, verbosity=0)


def start_sim(work: Path, *args: str, name: str = "zvmsim") -> tuple[Proc, str]:
    """``python -m zvmsim`` on a free port with ``args``; returns it and its URL once ready."""
    cmd = [PYTHON, "-m", "zvmsim", "--port", "0", "--cert-dir", str(work / "certs"), *args]
    proc = Proc(name, cmd, work / f"{name}.log", {**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        content = proc.wait_for(SIM_READY)
    except RuntimeError:
        proc.stop()
        raise
    return proc, content.split(SIM_READY, 1)[1].split()[0]


def start_worker(work: Path, *, concurrency: int, name: str, pool: str = "prefork") -> Proc:
    """A Celery worker (``pool``: prefork or threads) on this process's settings; returns once it is ready."""
    cmd = [
        PYTHON,
        "-m",
        "celery",
        "-A",
        "rewind",
        "worker",
        "-P",
        pool,
        "-c",
        str(concurrency),
        "--loglevel",
        "INFO",
        "--without-gossip",
        "--without-mingle",
        "-n",
        f"{name}@%h",
    ]
    proc = Proc(name, cmd, work / "worker.log")
    try:
        proc.wait_for("ready.")
    except RuntimeError:
        proc.stop()
        raise
    return proc


def sim_control() -> requests.Session:
    """An HTTP session for the simulator's control API (self-signed certificate, no proxies)."""
    import requests
    import urllib3

    urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
    http = requests.Session()
    # trust_env off: a REQUESTS_CA_BUNDLE in the environment would override verify=False.
    http.verify, http.trust_env = False, False
    return http


def register_sites(sim_url: str, slugs: Iterable[str]) -> dict[str, Site]:
    """Sites "Site A"... (by simulator slug) pointed at ``sim_url``, through the services, checked.

    A site that exists already is moved to ``sim_url`` (a new simulator run), and every
    site's identity is learned again. RuntimeError when a site's check fails.
    """
    from rewind.audit import Actor
    from rewind.models import Site
    from rewind.sites import site_check, site_create, site_update

    actor = Actor.system("bench")
    Site.objects.update(identifier="")
    sites = {}
    for slug in slugs:
        name, base_url = SITE_NAMES[slug], f"{sim_url}/{slug}"
        site = Site.objects.filter(name=name).first()
        if site is None:
            site = site_create(actor=actor, name=name, base_url=base_url, username="admin", password="zerto")
        else:
            site = site_update(actor=actor, site=site, base_url=base_url)
        check = site_check(site=site, force=True)  # a fresh simulator: ask even if a last run left it unavailable
        if not check.ok:
            raise RuntimeError(f"{name}: {check.error}")
        site.refresh_from_db()
        sites[slug] = site
    return sites
