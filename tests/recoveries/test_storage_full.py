"""A recovered-files folder that is full, then read-only, mid-recovery, on the production shape.

The folder (``REWIND_STORAGE_DIR`` of tests.stackfixtures' stack) is a 64 KiB tmpfs the test
mounts: the recovery of a 200 KB file fails when the disk fills, saying so, and its mount is ended;
read-only, the next run fails before it mounts anything; given room again, the file comes back
byte-exact. No mount is left after one reaper run, and the audit chain is intact.
"""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.stackfixtures import ProductionStack

pytestmark = pytest.mark.process

BIG = "/var/log/app/big.log"


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True, timeout=30)


@pytest.fixture
def small_folder(production_stack: ProductionStack) -> Iterator[Path]:
    folder = production_stack.storage
    folder.mkdir(parents=True, exist_ok=True)
    try:
        _mount("-t", "tmpfs", "-o", "size=64k,mode=0755", "tmpfs", str(folder))
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"mounting a small tmpfs needs CAP_SYS_ADMIN (root in CI): {exc.stderr.decode().strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False, timeout=30)


def test_a_full_then_read_only_recovered_files_folder_fails_clearly_and_leaves_no_mount(
    production_stack: ProductionStack, small_folder: Path
) -> None:
    stack = production_stack
    stack.sim.clear_faults()
    stack.sim.set_file("web01", BIG, size=200_000, seed=24)
    wanted = hashlib.sha256(stack.sim.read_file("web01", BIG)).hexdigest()
    assert stack.guarded("web01", "CHG-storage")["ok"]
    approver = stack.approver()

    full = stack.recover("web01", BIG, "CHG-storage")
    stack.approve(full, approver)
    out = stack.recovery_finished(full)
    assert out["status"] == "failed"
    assert "No space left on device" in out["error"], out
    assert "the mount was ended and nothing was kept" in out["error"]
    assert list(small_folder.rglob("*.part")) == []

    _mount("-o", "remount,ro", str(small_folder))
    read_only = stack.recover("web01", BIG, "CHG-storage")
    stack.approve(read_only, approver)
    out = stack.recovery_finished(read_only)
    assert out["status"] == "failed"
    assert "Read-only file system; nothing was mounted" in out["error"], out

    subprocess.run(["umount", str(small_folder)], check=True, timeout=30)  # room again: the disk below
    again = stack.recover("web01", BIG, "CHG-storage")
    stack.approve(again, approver)
    out = stack.recovery_finished(again)
    assert out["status"] == "succeeded", out
    assert out["result"]["sha256"] == wanted

    stack.manage("reap")
    assert stack.live_sessions() == []
    assert "audit chain OK" in stack.manage("audit_verify")
