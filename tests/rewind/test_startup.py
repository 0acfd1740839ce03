"""What the ASGI app's process sets up before it serves (``rewind.startup``)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from rewind.startup import GIL_SWITCH_INTERVAL_S


@pytest.mark.process
def test_the_web_process_hands_the_gil_to_its_event_loop_in_short_turns(tmp_path: os.PathLike[str]) -> None:
    probe = "import sys, rewind.asgi; print(sys.getswitchinterval())"
    env = {**os.environ, "REWIND_VAR_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert float(done.stdout.split()[-1]) == GIL_SWITCH_INTERVAL_S < 0.005  # Python's default is 5 ms
