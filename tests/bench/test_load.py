"""The load on the production shape (bench/load.py) at its CI size: every target that is not a timing holds.

``bench/load.py --quick`` starts the shape on a PostgreSQL and a Redis of its own: 10 agents guard
a VM each, one agent sends 10 guards of web01 with one change id, 4 recoveries are approved over
REST, 4 agents call an upstream through the gateway and 60 look-ups run beside. Timings (the
look-up's p99) and the busiest second at the ZVMs are the benchmark's to print, not this test's.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.simfixtures import PYTHON, REPO

pytestmark = [pytest.mark.process, pytest.mark.timeout(900)]

MUST_BE_ZERO = (
    "failed calls",
    "VPG-changes without exactly one tagged checkpoint",
    "recoveries not byte-exact",
    "our FLR sessions left after one reap",
    "audit chain broken",
)


def test_the_quick_load_ends_with_no_error_one_checkpoint_per_change_exact_files_and_nothing_mounted(
    tmp_path: Path,
) -> None:
    out = tmp_path / "load.json"
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE")}
    done = subprocess.run(
        [PYTHON, "bench/load.py", "--quick", "--json", str(out), "--work", str(tmp_path / "work")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=840,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    figures = {f["name"]: f for f in json.loads(out.read_text())["figures"]}
    for name in MUST_BE_ZERO:
        assert figures[name]["value"] == 0, (name, figures[name], done.stdout[-2000:])
    assert "failed calls: 0" in done.stdout
