"""The journal's history: checkpoints age out of it, the simulated clock moves, HistoryStatusApi tells it."""

from __future__ import annotations

from datetime import datetime
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

import pytest

from tests.simfixtures import SimError, SimHandle, run_sim
from tests.zvmsim.support import Zvm

HOUR = 3600.0


def _history(zvm: Zvm, vpg_name: str) -> dict[str, object] | None:
    return zvm.get(f"v1/vpgs/{zvm.vpg_id(vpg_name)}")["HistoryStatusApi"]


def _ids(zvm: Zvm, vpg_name: str) -> list[str]:
    return [r["CheckpointIdentifier"] for r in zvm.get(f"v1/vpgs/{zvm.vpg_id(vpg_name)}/checkpoints")]


def test_a_seeded_journal_holds_its_whole_configured_history(zvm_a: Zvm) -> None:
    history = _history(zvm_a, "vpg-db")
    assert history is not None
    assert history["ConfiguredHistoryInMinutes"] == 1440
    assert history["ActualHistoryInMinutes"] == 1440
    earliest = history["EarliestCheckpoint"]
    assert isinstance(earliest, dict)
    assert earliest["CheckpointIdentifier"] == _ids(zvm_a, "vpg-db")[0]


def test_a_shorter_history_drops_older_checkpoints_everywhere(sim: SimHandle, zvm_a: Zvm, zvm_b: Zvm) -> None:
    before = _ids(zvm_a, "vpg-db")
    sim.set_journal_history("vpg-db", 30)  # the seeded checkpoints are 4 h, 1 h, 15 min and 1 min old
    after = _ids(zvm_a, "vpg-db")
    assert after == before[2:]
    assert _ids(zvm_b, "vpg-db") == after  # both ZVMs list the VPG's one journal
    history = _history(zvm_a, "vpg-db")
    assert history is not None
    assert (history["ConfiguredHistoryInMinutes"], history["ActualHistoryInMinutes"]) == (30, 30)
    assert history["EarliestCheckpoint"]["CheckpointIdentifier"] == after[0]  # type: ignore[index]
    stats = zvm_a.get(f"v1/vpgs/{zvm_a.vpg_id('vpg-db')}/checkpoints/stats")
    assert stats["Earliest"]["CheckpointIdentifier"] == after[0]
    # Another VPG keeps its own history.
    assert len(_ids(zvm_a, "vpg-web")) == len(before)


def test_time_passing_ages_a_tagged_checkpoint_out(sim: SimHandle, zvm_a: Zvm, zvm_b: Zvm) -> None:
    cp = zvm_a.insert_checkpoint("vpg-db", "ages-out")
    sim.set_journal_history("vpg-db", 120)
    _advance(sim, HOUR, zvm_a, zvm_b)
    assert cp in _ids(zvm_a, "vpg-db")
    _advance(sim, HOUR + 60, zvm_a, zvm_b)
    assert cp not in _ids(zvm_a, "vpg-db")
    vm, vpg = zvm_b.vm_id("db01"), zvm_b.vpg_id("vpg-db")
    points = zvm_b.get(f"v1/vms/{vm}/pointsInTime", params={"vpgIdentifier": vpg})
    assert cp not in [p["Checkpoint"]["CheckpointIdentifier"] for p in points]
    # The journal still reaches back its whole history; it only holds no older checkpoint.
    history = _history(zvm_a, "vpg-db")
    assert history is not None
    assert history["ActualHistoryInMinutes"] == 120


def test_the_clock_moves_every_site_and_their_tokens_expire(sim: SimHandle, zvm_a: Zvm) -> None:
    before = parsedate_to_datetime(zvm_a.request("GET", "v1/localsite").headers["Date"])
    moved = sim.advance_clock(2 * HOUR)
    assert moved["shift_s"] == 2 * HOUR
    assert zvm_a.request("GET", "v1/localsite").status_code == 401  # a 300 s token from two hours ago
    zvm_a.token = zvm_a.login()
    after = parsedate_to_datetime(zvm_a.request("GET", "v1/localsite").headers["Date"])
    assert 2 * HOUR - 60 < (after - before).total_seconds() < 2 * HOUR + 60
    assert datetime.fromisoformat(sim.control("GET", "clock")["now"]) > after.replace(microsecond=0)
    with pytest.raises(SimError, match="400"):
        sim.advance_clock(-1)
    sim.reset()
    assert sim.control("GET", "clock")["shift_s"] == 0


def test_after_a_resync_the_actual_history_grows_up_to_the_configured_one(sim: SimHandle, zvm_a: Zvm) -> None:
    sim.set_journal_history("vpg-db", 60)
    sim.resync("vpg-db")
    assert _history(zvm_a, "vpg-db")["ActualHistoryInMinutes"] == 0  # type: ignore[index]
    _advance(sim, 20 * 60, zvm_a)
    assert _history(zvm_a, "vpg-db")["ActualHistoryInMinutes"] == 20  # type: ignore[index]
    _advance(sim, HOUR, zvm_a)
    assert _history(zvm_a, "vpg-db")["ActualHistoryInMinutes"] == 60  # type: ignore[index]
    # Only automatic checkpoints taken since the resync; without them, none at all.
    earliest: Any = _history(zvm_a, "vpg-db")["EarliestCheckpoint"]  # type: ignore[index]
    assert (earliest["Type"], earliest["Tag"]) == (0, None)
    sim.set_auto_checkpoints(0, "vpg-db")
    sim.resync("vpg-db")
    _advance(sim, 20 * 60, zvm_a)
    assert _history(zvm_a, "vpg-db")["EarliestCheckpoint"] is None  # type: ignore[index]


def _advance(sim: SimHandle, seconds: float, *zvms: Zvm) -> None:
    """Let time pass; the tokens of ``zvms`` expired meanwhile, so they log in again."""
    sim.advance_clock(seconds)
    for zvm in zvms:
        zvm.token = zvm.login()


def _mount_body(zvm: Zvm, cp: str) -> dict[str, object]:
    return {
        "jflr": {"vpgIdentifier": zvm.vpg_id("vpg-db"), "vmIdentifier": zvm.vm_id("db01"), "checkpointIdentifier": cp}
    }


def test_a_checkpoint_that_left_the_journal_cannot_be_mounted(sim: SimHandle, zvm_b: Zvm) -> None:
    oldest = _ids(zvm_b, "vpg-db")[0]
    sim.set_journal_history("vpg-db", 30)
    resp = zvm_b.request("POST", "v1/flrs", json=_mount_body(zvm_b, oldest))
    assert resp.status_code == 400
    assert "failed parsing as a valid CheckPoint Identifier" in resp.json()["Message"]
    # Variant: the ZVM accepts the mount, and the session then fails.
    sim.set_variants("site-b", aged_checkpoint_mount="mount_failed")
    session = zvm_b.post("v1/flrs", _mount_body(zvm_b, oldest))
    assert zvm_b.wait_mounted(session) == "MountFailed"
    # An identifier the journal never held is refused either way.
    unknown = zvm_b.request("POST", "v1/flrs", json=_mount_body(zvm_b, "999999999"))
    assert unknown.status_code == 400


@pytest.mark.parametrize(
    ("shape", "keys"),
    [
        ("full", {"ActualHistoryInMinutes", "ConfiguredHistoryInMinutes", "EarliestCheckpoint"}),
        ("no_actual", {"ConfiguredHistoryInMinutes", "EarliestCheckpoint"}),
        ("configured_only", {"ConfiguredHistoryInMinutes"}),
    ],
)
def test_history_status_variants_leave_fields_out(sim: SimHandle, zvm_a: Zvm, shape: str, keys: set[str]) -> None:
    sim.set_variants("site-a", history_status=shape)
    history = _history(zvm_a, "vpg-db")
    assert history is not None
    assert set(history) == keys


def test_history_status_may_be_missing_altogether(sim: SimHandle, zvm_a: Zvm) -> None:
    sim.set_variants("site-a", preset="history-missing")
    assert _history(zvm_a, "vpg-db") is None
    with pytest.raises(SimError, match="400"):
        sim.set_variants("site-a", history_status="some")


def test_bad_journal_settings_are_refused(sim: SimHandle) -> None:
    for bad in (0, -5, "ten", True, None):
        with pytest.raises(SimError, match="400"):
            sim.control("POST", "vpgs/vpg-db/journal", {"history_minutes": bad})
    assert sim.journal("vpg-db")["history_minutes"] == 1440


@pytest.mark.process
def test_the_command_line_sets_every_journal_history(tmp_path: Path) -> None:
    with run_sim(tmp_path, "--journal-history-minutes", "90") as server:
        handle = SimHandle(server)
        zvm = Zvm(handle, "site-a")
        history = _history(zvm, "vpg-web")
        assert history is not None
        assert history["ConfiguredHistoryInMinutes"] == history["ActualHistoryInMinutes"] == 90
        assert len(_ids(zvm, "vpg-web")) == 3  # the 4 h old seeded checkpoint is past the history
        assert handle.journal("vpg-web")["history_minutes"] == 90
