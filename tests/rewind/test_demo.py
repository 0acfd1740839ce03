"""The demo bootstrap behind ``make run``: demo people, demo sites, and the process supervisor."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from django.conf import settings
from django.contrib.auth.models import User
from django.core.management import call_command

from rewind.models import Site
from rewind.processes import Proc
from tests.mcpfixtures import free_port

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


def test_runstack_serves_and_stops_everything_on_ctrl_c(tmp_path: Path) -> None:
    port, sim_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(REWIND_VAR_DIR=str(tmp_path / "var"), REWIND_PORT=str(port), REWIND_SIM_PORT=str(sim_port))
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v0"], cwd=settings.BASE_DIR, env=env, check=True, timeout=120
    )
    proc = Proc(
        "runstack",
        [sys.executable, "manage.py", "runstack", "--workers", "1"],
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
    deadline = time.monotonic() + 10
    while (left := [pid for pid in children if Path(f"/proc/{pid}").exists()]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert left == []
    with pytest.raises(requests.ConnectionError):
        requests.get(f"http://127.0.0.1:{port}/admin/login/", timeout=5)
