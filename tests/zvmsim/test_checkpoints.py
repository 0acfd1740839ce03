"""Tagged checkpoints, tasks, date filters, initial sync, resync."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests.simfixtures import SimHandle
from tests.zvmsim.support import Zvm


def test_insert_runs_a_task_then_lists_the_tagged_checkpoint(zvm_a: Zvm, zvm_b: Zvm) -> None:
    vpg = zvm_a.vpg_id("vpg-web")
    task_id = zvm_a.post(f"v1/vpgs/{vpg}/checkpoints", {"checkpointName": "ai:bot | edit | vm=web01"})
    guid, site_guid = task_id.split(".")
    assert len(guid) == 36
    assert site_guid == zvm_a.get("v1/localsite")["SiteIdentifier"]
    first = zvm_a.get(f"v1/tasks/{task_id}")
    assert first["Type"] == "InsertTaggedCP"
    assert first["Status"]["State"] in (1, 6)
    done = zvm_a.wait_task(task_id)
    assert done["Status"] == {"State": 6, "Progress": 100}
    assert done["Completed"] is not None
    rows = zvm_a.get(f"v1/vpgs/{vpg}/checkpoints")
    tagged = [r for r in rows if r["Tag"] == "ai:bot | edit | vm=web01"]
    assert len(tagged) == 1
    assert tagged[0]["Type"] == 1
    assert tagged[0]["CheckpointIdentifier"].isdigit()
    # Checkpoints belong to the VPG: the recovery site's ZVM lists the same row.
    assert tagged[0] in zvm_b.get(f"v1/vpgs/{vpg}/checkpoints")
    # ... and the other VPG of the same VM does not have it.
    other = zvm_a.vpg_id("vpg-web-dr")
    assert all(r["Tag"] is None for r in zvm_a.get(f"v1/vpgs/{other}/checkpoints"))
    assert any(t["TaskIdentifier"] == task_id for t in zvm_a.get("v1/tasks"))
    assert zvm_a.get("v1/tasks", params={"status": "Completed"})
    assert zvm_b.request("GET", f"v1/tasks/{task_id}").status_code == 404


def test_every_vpg_has_untagged_journal_checkpoints(zvm_a: Zvm) -> None:
    rows = zvm_a.get(f"v1/vpgs/{zvm_a.vpg_id('vpg-db')}/checkpoints")
    assert len(rows) >= 3
    assert all(r["Tag"] is None and r["Type"] == 0 for r in rows)
    stamps = [r["TimeStamp"] for r in rows]
    assert stamps == sorted(stamps)
    assert all(s.endswith("Z") for s in stamps)


def test_initial_sync_refuses_a_checkpoint(zvm_a: Zvm, sim: SimHandle) -> None:
    vpg = zvm_a.vpg_id("vpg-new")
    resp = zvm_a.request("POST", f"v1/vpgs/{vpg}/checkpoints", json={"checkpointName": "x"})
    assert resp.status_code == 400
    assert "initial sync" in resp.json()["Message"]
    sim.set_vpg_status("vpg-new", 1, 0)
    assert isinstance(zvm_a.post(f"v1/vpgs/{vpg}/checkpoints", {"checkpointName": "x"}), str)
    sim.set_vpg_status("vpg-db", 0, 1)
    db = zvm_a.vpg_id("vpg-db")
    assert zvm_a.request("POST", f"v1/vpgs/{db}/checkpoints", json={"checkpointName": "y"}).status_code == 400
    assert zvm_a.get(f"v1/vpgs/{db}")["Status"] == 0


def test_checkpoint_dates_accept_every_zvm_format(zvm_a: Zvm) -> None:
    vpg = zvm_a.vpg_id("vpg-app-1")
    every = zvm_a.get(f"v1/vpgs/{vpg}/checkpoints")
    newest = datetime.fromisoformat(every[-1]["TimeStamp"].replace("Z", "+00:00"))
    after = newest - timedelta(seconds=1)
    formats = [
        after.strftime("%Y-%m-%dT%H:%M:%S.") + f"{after.microsecond // 1000:03d}Z",
        after.strftime("%Y-%m-%dT%H:%M:%SZ"),
        after.strftime("%Y-%m-%dT%H:%MZ"),
    ]
    for text in formats:
        rows = zvm_a.get(f"v1/vpgs/{vpg}/checkpoints", params={"startDate": text})
        assert rows == every[-1:], text
    for text in (
        newest.strftime("%Y-%m-%dT%HZ"),
        newest.strftime("%Y-%m-%d"),
        newest.strftime("%Y-%m"),
        newest.strftime("%Y"),
    ):
        rows = zvm_a.get(f"v1/vpgs/{vpg}/checkpoints", params={"startDate": text})
        assert every[-1] in rows, text
    future = (datetime.now(UTC) + timedelta(days=2)).strftime("%Y-%m-%d")
    assert zvm_a.get(f"v1/vpgs/{vpg}/checkpoints", params={"startDate": future}) == []
    assert zvm_a.get(f"v1/vpgs/{vpg}/checkpoints", params={"endDate": "2001"}) == []
    bad = zvm_a.request("GET", f"v1/vpgs/{vpg}/checkpoints", params={"startDate": "yesterday"})
    assert bad.status_code == 400


def test_checkpoint_stats_give_earliest_and_latest(zvm_a: Zvm) -> None:
    vpg = zvm_a.vpg_id("vpg-db")
    cp = zvm_a.insert_checkpoint("vpg-db", "stats-tag")
    stats = zvm_a.get(f"v1/vpgs/{vpg}/checkpoints/stats")
    assert stats["Latest"]["CheckpointIdentifier"] == cp
    assert stats["Latest"]["Tag"] == "stats-tag"
    assert stats["Earliest"]["TimeStamp"] < stats["Latest"]["TimeStamp"]


def test_resync_wipes_every_checkpoint(sim: SimHandle, zvm_a: Zvm) -> None:
    zvm_a.insert_checkpoint("vpg-db", "before-resync")
    sim.resync("vpg-db")
    vpg = zvm_a.vpg_id("vpg-db")
    assert zvm_a.get(f"v1/vpgs/{vpg}/checkpoints") == []
    assert zvm_a.get(f"v1/vpgs/{vpg}/checkpoints/stats") == {"Earliest": None, "Latest": None}


def test_points_in_time_carry_can_mount(zvm_a: Zvm, zvm_b: Zvm) -> None:
    vm, vpg = zvm_a.vm_id("db01"), zvm_a.vpg_id("vpg-db")
    on_b = zvm_b.get(f"v1/vms/{vm}/pointsInTime", params={"vpgIdentifier": vpg})
    assert on_b
    assert all(p["CanMount"]["IsAllowed"] for p in on_b)
    assert on_b[0]["Checkpoint"]["CheckpointIdentifier"]
    on_a = zvm_a.get(f"v1/vms/{vm}/pointsInTime", params={"vpgIdentifier": vpg})
    assert on_a
    assert not on_a[0]["CanMount"]["IsAllowed"]
    assert "recovery site" in on_a[0]["CanMount"]["Reason"]
