"""The demo behind ``make run``: demo people, demo sites, the process supervisor, and ``manage.py demo``."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import requests
from django.conf import settings
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command

from rewind.lib.processes import Proc, free_port, free_ports
from rewind.models import Site
from tests.fixtures import wait_until

pytestmark = pytest.mark.django_db


def test_demo_setup_creates_people_and_sites_once(sim, capsys) -> None:
    call_command("demo_setup", sim_url=sim.url)
    first = capsys.readouterr().out
    call_command("demo_setup", sim_url=sim.url)
    second = capsys.readouterr().out
    assert set(Site.objects.values_list("name", flat=True)) == {"Site A", "Site B"}
    assert all(site.identifier for site in Site.objects.all())
    approver = User.objects.get(username="approver")
    assert approver.has_perm("recoveries.approve_recovery")
    assert not approver.is_superuser
    assert User.objects.get(username="admin").is_superuser
    # The same credentials are printed again on the second run: nothing was recreated.
    assert [line for line in first.splitlines() if "password" in line] == [
        line for line in second.splitlines() if "password" in line
    ]
    assert "Site A at" in second
    assert "FAILED" not in second


@pytest.mark.process
def test_runstack_serves_and_stops_everything_on_ctrl_c(tmp_path: Path) -> None:
    port, sim_port = free_ports(2), free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(REWIND_VAR_DIR=str(tmp_path / "var"), REWIND_PORT=str(port), REWIND_SIM_PORT=str(sim_port))
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v0"], cwd=settings.BASE_DIR, env=env, check=True, timeout=120
    )
    proc = Proc(
        "runstack",
        [sys.executable, "manage.py", "runstack"],
        log=tmp_path / "run.log",
        cwd=settings.BASE_DIR,
        env=env,
    )
    try:
        output = proc.wait_for_output("Press Ctrl-C", timeout=90)
        assert "Demo admin:" in output
        assert "Demo approver:" in output
        assert requests.get(f"http://127.0.0.1:{port}/admin/login/", timeout=10).status_code == 200
        assert requests.get(f"https://127.0.0.1:{sim_port}/_sim/state", verify=False, timeout=10).ok
        children = subprocess.run(["pgrep", "-s", str(proc.pid)], capture_output=True, text=True).stdout.split()
        proc.send(signal.SIGINT)  # what the terminal sends on Ctrl-C
        assert proc.wait_gone(60), proc.output()[-2000:]
    finally:
        # Ask first: the children live in sessions of their own, so only runstack can stop them.
        proc.stop(sig=signal.SIGINT, timeout=60)
    # A stopped process leaves /proc once it is reaped: a bound on that, not a delay.
    wait_until(
        lambda: not [pid for pid in children if Path(f"/proc/{pid}").exists()], 10, what="the stack's processes gone"
    )
    with pytest.raises(requests.ConnectionError):
        requests.get(f"http://127.0.0.1:{port}/admin/login/", timeout=5)


def _stack(tmp_path: Path) -> tuple[Proc, dict[str, str]]:
    """``manage.py runstack`` (what ``make run`` runs) in a state folder of its own, on free ports, up."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(REWIND_VAR_DIR=str(tmp_path / "var"), REWIND_PORT=str(free_ports(2)), REWIND_SIM_PORT=str(free_port()))
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v0"], cwd=settings.BASE_DIR, env=env, check=True, timeout=120
    )
    proc = Proc(
        "runstack",
        [sys.executable, "manage.py", "runstack"],
        log=tmp_path / "run.log",
        cwd=settings.BASE_DIR,
        env=env,
    )
    try:
        proc.wait_for_output("Press Ctrl-C", timeout=90)
    except BaseException:
        proc.stop(sig=signal.SIGINT, timeout=60)
        raise
    return proc, env


@pytest.mark.timeout(420)
@pytest.mark.process
def test_manage_demo_runs_the_loop_against_the_stack(tmp_path: Path) -> None:
    proc, env = _stack(tmp_path)
    try:
        # A second terminal: the same state folder and ports as make run, nothing else.
        done = _demo(env, "--auto-approve")
        # The same loop through the gateway: the agent calls the guest shell's exec, no zerto tool first.
        through = _demo(env, "--gateway", "--auto-approve")
    finally:
        proc.stop(sig=signal.SIGINT, timeout=60)
    gateway_out = through.stdout
    assert through.returncode == 0, gateway_out[-4000:] + through.stderr[-3000:] + proc.output()[-3000:]
    assert "without asking any zerto tool first" in gateway_out
    assert re.search(r"call gwc_\S+: guarded on the way through, change gw-gwc_", gateway_out)
    assert "+    worker_connections 768;" in gateway_out
    assert "recoveries.request.succeeded" in gateway_out
    # The service put the file back itself, after the diff was shown and Write back clicked, and proved it.
    assert "The approval page shows the file in the guest beside the checkpoint's" in gateway_out
    assert "-    worker_connections 4096\n+    worker_connections 768;" in gateway_out
    assert re.search(r"guarded first: guard #\d+ \(change restore-\d+\)", gateway_out)
    assert "restored: verified" in gateway_out
    assert "web01:/etc/nginx/nginx.conf now holds the good file again" in gateway_out
    assert "recoveries.restore.finished" in gateway_out
    out = done.stdout
    assert done.returncode == 0, out[-4000:] + done.stderr[-3000:] + proc.output()[-3000:]
    assert "Approve it here: http://127.0.0.1:" in out
    # The diff from the agent's bad edit back to the recovered file.
    assert "--- web01:/etc/nginx/nginx.conf as the agent left it" in out
    assert "-    worker_connections 4096\n+    worker_connections 768;" in out
    assert re.search(r"Unmount: done \(FLR session \S+\)", out)
    trail = out[out.index("Audit trail of the change:") :]
    for action in (
        "guard.created",
        "guard.checkpoint.listed",
        "guard.ok",
        "recoveries.request.requested",
        "recoveries.request.approved",
        "recoveries.session.mounted",
        "recoveries.file.downloaded",
        "recoveries.session.unmounted",
        "recoveries.request.succeeded",
    ):
        assert action in trail, action
    assert "user:approver" in trail
    assert "agent:demo-agent" in trail


def _demo(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``manage.py demo`` in a second terminal: the same state folder and ports as the stack, nothing else."""
    return subprocess.run(
        [sys.executable, "manage.py", "demo", *args],
        cwd=settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.timeout(420)
@pytest.mark.process
def test_manage_demo_folder_brings_back_a_folder_against_the_stack(tmp_path: Path) -> None:
    proc, env = _stack(tmp_path)
    try:
        done = _demo(env, "--folder", "--auto-approve")
    finally:
        proc.stop(sig=signal.SIGINT, timeout=60)
    out = done.stdout
    assert done.returncode == 0, out[-4000:] + done.stderr[-3000:] + proc.output()[-3000:]
    assert "The agent asks for the folder back" in out
    manifest = out[out.index("Manifest:") :]
    for rel in ("index.html", "404.html", "css/site.css", "js/app.js", "img/logo.bin"):
        assert re.search(rf"^\s+\d+\s+[0-9a-f]{{16}}\s+\S+\s+{re.escape(rel)}$", manifest, re.MULTILINE), rel
    assert "5 files," in manifest
    assert "every file matches its sha256" in out
    assert re.search(r"Unmount: done \(FLR session \S+\)", out)
    trail = out[out.index("Audit trail of the change:") :]
    for action in ("recoveries.request.approved", "recoveries.folder.downloaded", "recoveries.request.succeeded"):
        assert action in trail, action
    assert "back on web01 from the zip" in out


def test_manage_demo_says_how_to_start_the_stack_when_nothing_answers() -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(CommandError, match=r"does not answer at http://127\.0\.0\.1:\d+: start it with `make run`"):
        call_command("demo", url=closed, auto_approve=True)


def test_manage_demo_refuses_a_database_that_is_not_the_stacks(live_server, sim) -> None:
    with pytest.raises(CommandError, match=r"no site on the simulator at .*same REWIND_VAR_DIR or DATABASE_URL"):
        call_command("demo", url=live_server.url, sim_url=sim.url, auto_approve=True)


@pytest.mark.timeout(420)
@pytest.mark.process
def test_manage_demo_approval_holds_the_exact_call_for_a_person_and_a_stop_refuses_the_next(tmp_path: Path) -> None:
    proc, env = _stack(tmp_path)
    try:
        done = _demo(env, "--approval", "--auto-approve")
    finally:
        proc.stop(sig=signal.SIGINT, timeout=60)
    out = done.stdout
    assert done.returncode == 0, out[-4000:] + done.stderr[-3000:] + proc.output()[-3000:]
    assert "the catalog entry guestshell/exec says approve" in out
    assert re.search(r"… waiting for a person: http://\S+/admin/rewind/heldcall/\d+/review/", out)
    assert "approver approves it on its page (--auto-approve)" in out
    assert re.search(r"Approved by approver, forwarded once: call gwc_\S+ released, ok", out)
    assert "-    worker_connections 768;\n+    worker_connections 4096" in out
    assert re.search(r"one argument changed is held call #\d+, a new request: denied", out)
    assert "not the command that was approved; /etc/nginx/nginx.conf is still there: True" in out
    assert "STOPPED: every guarded change everywhere is stopped by approver" in out
