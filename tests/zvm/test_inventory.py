"""Sites, VMs, VPGs, checkpoints and tasks read from the simulator into typed results."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from rewind.zvm import Task, ZvmClient, ZvmNotFoundError
from tests.fixtures import wait_until
from tests.helpers import calls
from tests.simfixtures import SimHandle
from tests.zvm.support import MakeClient


def _site_ids(sim: SimHandle) -> dict[str, str]:
    return {s["slug"]: s["identifier"] for s in sim.state()["sites"]}


def test_it_reads_the_local_and_peer_sites(sim: SimHandle, make_client: MakeClient) -> None:
    ids = _site_ids(sim)
    client = make_client("site-a")
    local = client.local_site()
    assert (local.identifier, local.name, local.type) == (ids["site-a"], "Site A", "VCenter")
    assert local.version
    peers = {p.name: p for p in client.peer_sites()}
    assert peers["Site B"].identifier == ids["site-b"]
    assert peers["Site B"].host_name
    assert "Site A" not in peers
    assert make_client("site-aws").local_site().type == "AWS"


def test_it_reads_every_vm_row_of_a_vm_in_two_vpgs(sim: SimHandle, make_client: MakeClient) -> None:
    ids = _site_ids(sim)
    expected = sim.vm("web01")
    rows = make_client("site-a").list_vms(vm_name="web01")
    assert {r.vpg_name for r in rows} == {"vpg-web", "vpg-web-dr"}
    assert {r.vpg_identifier for r in rows} == {v["identifier"] for v in expected["vpgs"]}
    for row in rows:
        assert (row.vm_identifier, row.vm_name) == (expected["identifier"], "web01")
        assert row.protected_site.is_local
        assert row.protected_site.identifier == ids["site-a"]
        assert not row.recovery_site.is_local
        assert row.recovery_site.identifier == ids["site-b"]
        assert (row.protected_site_name, row.recovery_site_name) == ("Site A", "Site B")
        assert row.ip_addresses == ("10.0.0.11",)
        assert row.is_flr_enabled is True
        assert row.status is not None
    on_b = make_client("site-b").list_vms(vm_identifier=expected["identifier"])
    assert len(on_b) == 2
    assert all(r.recovery_site.is_local for r in on_b)


def test_it_reads_vpgs_and_names_their_status(sim: SimHandle, make_client: MakeClient) -> None:
    client = make_client()
    (new,) = client.list_vpgs(name="vpg-new")
    assert (new.status, new.sub_status) == (0, 1)
    assert client.status_name(new.status) == "Initializing"
    assert client.substatus_name(new.sub_status) == "InitialSync"
    assert client.vpg_status_names()[1] == "MeetingSLA"
    client.vpg_status_names()
    assert calls(sim, "site-a", "GET /v1/vpgs/statuses") == 1  # cached per client
    assert client.get_vpg(new.identifier or "") == new
    assert len(client.list_vpgs()) >= 10


def test_it_sees_a_failover_test_running(sim: SimHandle, make_client: MakeClient) -> None:
    sim.control("POST", "vpgs/vpg-web/status", {"status": 1, "sub_status": 0, "failover_test": True})
    (vpg,) = make_client().list_vpgs(name="vpg-web")
    assert vpg.failover_test_running
    (other,) = make_client().list_vpgs(name="vpg-db")
    assert not other.failover_test_running


def test_an_unknown_vpg_is_not_found(make_client: MakeClient) -> None:
    with pytest.raises(ZvmNotFoundError) as caught:
        make_client().get_vpg("00000000-0000-0000-0000-000000000000")
    assert caught.value.status == 404
    assert caught.value.zvm_message


def test_it_reads_journal_checkpoints_and_their_stats(make_client: MakeClient) -> None:
    client = make_client()
    (vpg,) = client.list_vpgs(name="vpg-web")
    checkpoints = client.list_checkpoints(vpg.identifier or "")
    assert checkpoints
    assert all(c.identifier and c.timestamp and c.timestamp.tzinfo for c in checkpoints)
    stats = client.checkpoint_stats(vpg.identifier or "")
    assert stats.earliest
    assert stats.latest
    assert stats.earliest.timestamp
    assert stats.latest.timestamp
    assert stats.earliest.timestamp <= stats.latest.timestamp
    later = client.list_checkpoints(vpg.identifier or "", start=stats.latest.timestamp + timedelta(seconds=1))
    assert later == []


def _wait_task(client: ZvmClient, task_id: str) -> Task:
    def done() -> Task | None:
        task = client.get_task(task_id)
        return task if task.completed or task.failed else None

    return wait_until(done, 20.0, what="the task")


def test_it_inserts_a_tagged_checkpoint_and_finds_it_listed(make_client: MakeClient) -> None:
    client = make_client()
    (vpg,) = client.list_vpgs(name="vpg-db")
    since = datetime.now(UTC) - timedelta(minutes=1)
    task_id = client.insert_tagged_checkpoint(vpg.identifier or "", "ai:test | edit | vm=db01")
    task = _wait_task(client, task_id)
    assert task.completed
    assert not task.failed
    assert task.identifier == task_id
    assert task.progress == 100
    listed = wait_until(
        lambda: [
            c for c in client.list_checkpoints(vpg.identifier or "", start=since) if c.tag == "ai:test | edit | vm=db01"
        ],
        20.0,
        what="the tagged checkpoint",
    )
    assert len(listed) == 1
    assert listed[0].timestamp
    assert listed[0].timestamp >= since


def test_it_reports_a_failed_task(sim: SimHandle, make_client: MakeClient) -> None:
    sim.add_fault("task_fail", site="site-a", message="journal is full")
    client = make_client()
    (vpg,) = client.list_vpgs(name="vpg-db")
    task = _wait_task(client, client.insert_tagged_checkpoint(vpg.identifier or "", "t"))
    assert task.failed
    assert not task.completed
    assert task.state == 4
    assert task.complete_reason == "journal is full"


def test_it_reads_points_in_time_with_can_mount(sim: SimHandle, make_client: MakeClient) -> None:
    vm = sim.vm("web01")
    vpg_id = next(v["identifier"] for v in vm["vpgs"] if v["name"] == "vpg-web")
    points = make_client("site-b").points_in_time(vm["identifier"], vpg_id=vpg_id)
    assert points
    assert all(p.checkpoint and p.checkpoint.identifier for p in points)
    assert {p.can_mount for p in points} <= {True, False}
    assert any(p.can_mount for p in points)


def test_it_lists_insert_tasks_by_type_and_start(sim: SimHandle, make_client: MakeClient) -> None:
    client = make_client("site-a")
    vpg_id = client.list_vpgs(name="vpg-db")[0].identifier
    assert vpg_id is not None
    before = datetime.now(UTC) - timedelta(seconds=5)
    task_id = client.insert_tagged_checkpoint(vpg_id, "list-tasks-probe")
    tasks = client.list_tasks(task_type="InsertTaggedCP", started_after=before)
    mine = [t for t in tasks if t.identifier == task_id]
    assert len(mine) == 1
    assert mine[0].vpg_identifiers == (vpg_id,)
    assert mine[0].type == "InsertTaggedCP"
    assert mine[0].started is not None
    assert all(t.identifier != task_id for t in client.list_tasks(started_after=datetime.now(UTC) + timedelta(hours=1)))
