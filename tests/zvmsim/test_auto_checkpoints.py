"""Automatic journal checkpoints: one every few seconds per VPG, each holding the guests' files as
they were at its time, computed when read (no background task), moving with the simulated clock."""

from __future__ import annotations

from datetime import UTC, datetime
from itertools import pairwise
from pathlib import Path

import pytest

from tests.simfixtures import SimError, SimHandle, run_sim
from tests.zvmsim.support import NGINX_PATH, Zvm, download, mounted

NGINX = "/etc/nginx/nginx.conf"


def _rows(zvm: Zvm, vpg: str, **params: str) -> list[dict[str, object]]:
    return zvm.get(f"v1/vpgs/{zvm.vpg_id(vpg)}/checkpoints", params=params or None)


def _auto(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    return [r for r in rows if r["Type"] == 0 and r["Tag"] is None and len(str(r["CheckpointIdentifier"])) > 12]


def _ts(row: dict[str, object]) -> float:
    return datetime.fromisoformat(str(row["TimeStamp"]).replace("Z", "+00:00")).timestamp()


def _z(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def test_the_listing_shows_automatic_checkpoints_spaced_by_the_interval(sim: SimHandle, zvm_a: Zvm) -> None:
    sim.advance_clock(60)
    rows = _rows(zvm_a, "vpg-web")
    auto = _auto(rows)
    assert 11 <= len(auto) <= 13  # one every 5 s over a minute
    gaps = {round(_ts(b) - _ts(a), 3) for a, b in pairwise(auto)}
    assert gaps == {5.0}
    assert [_ts(r) for r in rows] == sorted(_ts(r) for r in rows)  # oldest first, with the seeded ones
    assert len(_rows(zvm_a, "vpg-web")) == len(rows)  # the same ones on every read
    assert _auto(_rows(zvm_a, "vpg-db"))[0]["CheckpointIdentifier"] != auto[0]["CheckpointIdentifier"]
    # Both sites' ZVMs list the VPG's one journal; the date filters apply to them too.
    zvm_b = Zvm(sim, "site-b")
    assert _rows(zvm_b, "vpg-web") == rows
    window = _rows(zvm_a, "vpg-web", startDate=_z(_ts(auto[2])), endDate=_z(_ts(auto[4]) + 0.001))
    assert [r["CheckpointIdentifier"] for r in window] == [r["CheckpointIdentifier"] for r in auto[2:5]]
    stats = zvm_a.get(f"v1/vpgs/{zvm_a.vpg_id('vpg-web')}/checkpoints/stats")
    assert stats["Latest"]["CheckpointIdentifier"] == auto[-1]["CheckpointIdentifier"]


def test_a_changed_file_comes_back_from_the_automatic_checkpoint_before_the_change(sim: SimHandle, zvm_b: Zvm) -> None:
    original = sim.read_file("web01", NGINX)
    sim.advance_clock(12)
    sim.set_file("web01", NGINX, text="broken at T\n")
    changed_at = datetime.fromisoformat(sim.control("GET", "clock")["now"].replace("Z", "+00:00")).timestamp()
    sim.advance_clock(12)
    sim.set_file("web01", NGINX, text="broken again\n")
    auto = _auto(_rows(zvm_b, "vpg-web"))
    before = [r for r in auto if _ts(r) < changed_at - 0.5]
    after = [r for r in auto if _ts(r) > changed_at + 0.5]
    assert before
    assert after
    old = mounted(zvm_b, "vpg-web", "web01", str(before[-1]["CheckpointIdentifier"]))
    assert download(zvm_b, old, NGINX_PATH) == original
    new = mounted(zvm_b, "vpg-web", "web01", str(after[-1]["CheckpointIdentifier"]))
    assert download(zvm_b, new, NGINX_PATH) == b"broken at T\n"
    # One still pending (after the last change) holds the live tree, and keeps it.
    sim.advance_clock(6)
    latest = str(_auto(_rows(zvm_b, "vpg-web"))[-1]["CheckpointIdentifier"])
    session = mounted(zvm_b, "vpg-web", "web01", latest)
    sim.set_file("web01", NGINX, text="later\n")
    assert download(zvm_b, session, NGINX_PATH) == b"broken again\n"
    assert download(zvm_b, mounted(zvm_b, "vpg-web", "web01", latest), NGINX_PATH) == b"broken again\n"


def test_automatic_checkpoints_age_out_of_the_journal(sim: SimHandle, zvm_a: Zvm) -> None:
    sim.set_file("web01", NGINX, text="v1\n")  # seals nothing yet: no automatic checkpoint exists
    sim.advance_clock(30 * 60)
    sim.set_file("web01", NGINX, text="v2\n")  # seals half an hour of them, with one capture
    zvm_a.token = zvm_a.login()  # the token expired meanwhile
    first = _auto(_rows(zvm_a, "vpg-web"))[0]
    sim.set_journal_history("vpg-web", 10)
    auto = _auto(_rows(zvm_a, "vpg-web"))
    assert first["CheckpointIdentifier"] not in [r["CheckpointIdentifier"] for r in auto]
    assert 119 <= len(auto) <= 121  # ten minutes of them
    earliest = sim.journal("vpg-web")["earliest"]
    assert earliest["identifier"] == auto[0]["CheckpointIdentifier"]
    body = {
        "jflr": {
            "vpgIdentifier": zvm_a.vpg_id("vpg-web"),
            "vmIdentifier": zvm_a.vm_id("web01"),
            "checkpointIdentifier": first["CheckpointIdentifier"],
        }
    }
    zvm_b = Zvm(sim, "site-b")
    assert zvm_b.request("POST", "v1/flrs", json=body).status_code == 400


def test_they_can_be_turned_off_per_vpg_or_everywhere(sim: SimHandle, zvm_a: Zvm) -> None:
    assert sim.journal("vpg-web")["auto_checkpoint_s"] == 5
    sim.advance_clock(20)
    sim.set_auto_checkpoints(0, "vpg-web")
    kept = len(_auto(_rows(zvm_a, "vpg-web")))
    assert kept >= 3  # those taken so far stay
    sim.advance_clock(60)
    assert len(_auto(_rows(zvm_a, "vpg-web"))) == kept
    assert len(_auto(_rows(zvm_a, "vpg-db"))) >= 15
    sim.set_auto_checkpoints(2)
    assert sim.journal("vpg-web")["auto_checkpoint_s"] == 2
    sim.advance_clock(10)
    assert len(_auto(_rows(zvm_a, "vpg-web"))) == kept + 5
    for bad in (-1, 0.01, "often", True):
        with pytest.raises(SimError, match="400"):
            sim.set_auto_checkpoints(bad)  # type: ignore[arg-type]
    sim.reset()
    assert sim.journal("vpg-web")["auto_checkpoint_s"] == 5


@pytest.mark.process
def test_the_command_line_sets_or_disables_them(tmp_path: Path) -> None:
    with run_sim(tmp_path, "--auto-checkpoint-s", "0") as server:
        handle = SimHandle(server)
        zvm = Zvm(handle, "site-a")
        handle.advance_clock(60)
        assert _auto(_rows(zvm, "vpg-web")) == []
        assert len(_rows(zvm, "vpg-web")) == 4  # the seeded ones only
        assert handle.journal("vpg-web")["auto_checkpoint_s"] == 0
