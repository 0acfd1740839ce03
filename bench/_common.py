"""What the benchmarks share: a throwaway state, the simulator, a Celery worker, sites, processes.

Every benchmark works on its own state folder under ``var/``, whatever DATABASE_URL or REDIS_URL say, so a run
never touches a configured database or a running service's broker; every process it starts is a
``rewind.lib.processes.Proc``, stopped at the end.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from rewind.lib.processes import Proc, ProcessError, free_port
from zvmsim.auth import PASSWORD

if TYPE_CHECKING:
    import requests

    from rewind.models import Site

REPO = Path(__file__).resolve().parent.parent
_VENV_PYTHON = REPO / ".venv" / "bin" / "python"
PYTHON = str(_VENV_PYTHON) if _VENV_PYTHON.exists() else sys.executable
START_TIMEOUT = 60.0
SIM_READY = "zvmsim ready on "
SITE_NAMES = {"site-a": "Site A", "site-b": "Site B", "site-c": "Site C"}


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
    proc = Proc(name, cmd, log=work / f"{name}.log", cwd=REPO, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        content = proc.wait_for_output(SIM_READY, timeout=START_TIMEOUT)
    except ProcessError:
        proc.stop(timeout=15)
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
    proc = Proc(name, cmd, log=work / "worker.log", cwd=REPO, env={**os.environ})
    try:
        proc.wait_for_output("ready.", timeout=START_TIMEOUT)
    except ProcessError:
        proc.stop(timeout=15)
        raise
    return proc


def sim_control() -> requests.Session:
    """An HTTP session for the simulator's control API (``zvmsim.control_client``)."""
    from zvmsim.control_client import control_session

    return control_session()


def register_sites(sim_url: str, slugs: Iterable[str]) -> dict[str, Site]:
    """Sites "Site A"... (by simulator slug) pointed at ``sim_url``, through the services, checked.

    A site that exists already is moved to ``sim_url`` (a new simulator run), and every
    site's identity is learned again. RuntimeError when a site's check fails.
    """
    from rewind.audit import Actor
    from rewind.models import Site
    from rewind.sites import site_register

    actor = Actor.system("bench")
    Site.objects.update(identifier="")
    sites = {}
    for slug in slugs:
        name = SITE_NAMES[slug]
        check = site_register(actor=actor, name=name, base_url=f"{sim_url}/{slug}", username="admin", password=PASSWORD)
        if not check.ok:
            raise RuntimeError(f"{name}: {check.error}")
        check.site.refresh_from_db()
        sites[slug] = check.site
    return sites


PG_BIN = Path("/usr/lib/postgresql")


def _pg_bin(tool: str) -> str:
    """A PostgreSQL server program of the newest version installed (Debian keeps them off PATH)."""
    versions = sorted((p for p in PG_BIN.glob("*/bin") if (p / tool).exists()), key=lambda p: int(p.parent.name))
    if not versions:
        raise SystemExit(f"PostgreSQL's {tool} is not installed under {PG_BIN}")
    return str(versions[-1] / tool)


@contextlib.contextmanager
def private_postgres(work: Path) -> Iterator[str]:
    """A PostgreSQL server of this benchmark's own, on a free port, with its default settings.

    Yields the URL of a database ``bench`` on it; stopped and removed at the end. initdb refuses to
    run as root, so the server runs as the ``postgres`` user when this process is root, in a folder
    of its own under the system's temporary folder (the postgres user cannot reach root's private
    ones, pytest's among them); its log is copied to ``work/pg.log``. Nothing of a configured
    server is touched.
    """
    home = Path(tempfile.mkdtemp(prefix="rewind-bench-pg-"))
    data, log = home / "pg-data", home / "pg.log"
    as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    if as_postgres:
        shutil.chown(home, "postgres")
    port = free_port()
    ctl = [*as_postgres, _pg_bin("pg_ctl"), "-D", str(data), "-l", str(log), "-w"]
    try:
        _run_or_say([*as_postgres, _pg_bin("initdb"), "-D", str(data), "-U", "postgres", "-A", "trust", "-E", "UTF8"])
        _run_or_say([*ctl, "-o", f"-p {port} -k {home} -c listen_addresses=127.0.0.1", "start"])
        _run_or_say(["psql", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "-c", "CREATE DATABASE bench"])
        yield f"postgres://postgres@127.0.0.1:{port}/bench"
    finally:
        subprocess.run([*ctl, "-m", "fast", "stop"], capture_output=True, check=False)
        work.mkdir(parents=True, exist_ok=True)
        if log.exists():
            shutil.copyfile(log, work / "pg.log")
        shutil.rmtree(home, ignore_errors=True)


def _run_or_say(argv: list[str]) -> None:
    """Runs ``argv``; a failure ends the benchmark with the program's own words, not just its exit code."""
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}): {(done.stderr or done.stdout).strip()[-1500:]}")


@contextlib.contextmanager
def private_redis(work: Path) -> Iterator[str]:
    """A ``redis-server`` of this benchmark's own on a free port, keeping nothing on disk; yields its URL."""
    port = free_port()
    argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    proc = Proc("redis-server", [*argv, "--dir", str(work)], log=work / "redis.log", cwd=work)
    try:
        proc.wait_for_output("Ready to accept connections", timeout=START_TIMEOUT)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.stop(timeout=15)


PRODUCTION_HELP = "the production shape: PostgreSQL and Redis, private instances of this run"
PRODUCTION_SHAPE = " (PostgreSQL, Redis)"  # after each figure's name, so runs of the two shapes never compare


def production_servers(stack: contextlib.ExitStack, work: Path) -> dict[str, str]:
    """``DATABASE_URL`` and ``REDIS_URL`` of a PostgreSQL and a Redis of this run's own, stopped with ``stack``."""
    (work / "pg").mkdir(parents=True, exist_ok=True)
    return {
        "DATABASE_URL": stack.enter_context(private_postgres(work / "pg")),
        "REDIS_URL": stack.enter_context(private_redis(work)),
    }
