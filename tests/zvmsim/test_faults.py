"""Every injected fault kind, latency, and the fault bookkeeping (site scope, count, clear)."""

from __future__ import annotations

import threading

import pytest
import requests

from tests.fixtures import wait_until
from tests.simfixtures import SimError, SimHandle
from tests.zvmsim.support import Zvm


def _insert(zvm: Zvm, vpg_name: str, tag: str) -> tuple[str, str]:
    vpg = zvm.vpg_id(vpg_name)
    return vpg, zvm.post(f"v1/vpgs/{vpg}/checkpoints", {"checkpointName": tag})


def _tags(zvm: Zvm, vpg: str) -> list[str]:
    return [r["Tag"] for r in zvm.get(f"v1/vpgs/{vpg}/checkpoints") if r["Tag"]]


def test_checkpoint_listing_delay(sim: SimHandle, zvm_a: Zvm) -> None:
    sim.add_fault("checkpoint_listing_delay", seconds=3)
    vpg, task = _insert(zvm_a, "vpg-db", "slow")
    assert zvm_a.wait_task(task)["Status"]["State"] == 6
    assert _tags(zvm_a, vpg) == []
    sim.advance_clock(3)  # listed 3 s after its task completed, which is already past
    assert _tags(zvm_a, vpg) == ["slow"]


def test_checkpoint_never_listed(sim: SimHandle, zvm_a: Zvm) -> None:
    sim.add_fault("checkpoint_never_listed", site="site-a")
    vpg, task = _insert(zvm_a, "vpg-db", "ghost")
    assert zvm_a.wait_task(task)["Status"]["State"] == 6
    # No need to wait: a checkpoint is listed when its task completes, and this one's "never"
    # was decided when it was inserted.
    assert _tags(zvm_a, vpg) == []


def test_task_fail(sim: SimHandle, zvm_a: Zvm) -> None:
    sim.add_fault("task_fail", message="Journal is full")
    vpg, task = _insert(zvm_a, "vpg-db", "doomed")
    done = zvm_a.wait_task(task)
    assert done["Status"]["State"] == 4
    assert done["CompleteReason"] == "Journal is full"
    assert _tags(zvm_a, vpg) == []


def test_task_delay(sim: SimHandle, zvm_a: Zvm) -> None:
    sim.add_fault("task_delay", seconds=60)
    _, task = _insert(zvm_a, "vpg-db", "waiting")
    sim.advance_clock(30)  # far past an undelayed task's 0.3 s, half of this one's 60
    status = zvm_a.get(f"v1/tasks/{task}")["Status"]
    assert status["State"] == 1
    assert 45 <= status["Progress"] < 100  # about half way
    assert zvm_a.get("v1/tasks", params={"status": "InProgress"})[0]["TaskIdentifier"] == task
    sim.advance_clock(30)
    assert zvm_a.get(f"v1/tasks/{task}")["Status"]["State"] == 6


def test_http_error_with_count_and_method(sim: SimHandle, zvm_a: Zvm) -> None:
    sim.add_fault("http_error", status=503, path_regex=r"/v1/vms$", count=2)
    assert [zvm_a.request("GET", "v1/vms").status_code for _ in range(3)] == [503, 503, 200]
    sim.add_fault("http_error", status=500, path_regex="checkpoints", method="POST")
    vpg = zvm_a.vpg_id("vpg-db")
    assert zvm_a.request("GET", f"v1/vpgs/{vpg}/checkpoints").status_code == 200
    failed = zvm_a.request("POST", f"v1/vpgs/{vpg}/checkpoints", json={"checkpointName": "x"})
    assert failed.status_code == 500
    assert failed.json()["Message"]


def test_http_error_is_scoped_to_its_site(sim: SimHandle, zvm_a: Zvm, zvm_b: Zvm) -> None:
    sim.add_fault("http_error", site="site-b", status=502, path_regex="localsite")
    assert zvm_a.request("GET", "v1/localsite").status_code == 200
    assert zvm_b.request("GET", "v1/localsite").status_code == 502


def test_http_error_can_hit_the_token_endpoint(sim: SimHandle) -> None:
    sim.add_fault("http_error", status=503, path_regex="openid-connect/token", count=1)
    with pytest.raises(SimError, match="503"):
        sim.token("site-a")
    assert sim.token("site-a")


def test_hang_makes_clients_time_out(sim: SimHandle, zvm_a: Zvm) -> None:
    sim.add_fault("hang", seconds=5, path_regex="localsite", count=1)
    with pytest.raises(requests.exceptions.ReadTimeout):
        zvm_a.http.get(zvm_a.base + "/v1/localsite", headers={"Authorization": f"Bearer {zvm_a.token}"}, timeout=0.5)
    assert zvm_a.request("GET", "v1/localsite").status_code == 200


def test_clearing_the_faults_ends_a_hang_in_progress(sim: SimHandle, zvm_a: Zvm) -> None:
    answers: list[int] = []

    def ask() -> None:
        headers = {"Authorization": f"Bearer {zvm_a.token}"}
        answers.append(zvm_a.http.get(zvm_a.base + "/v1/localsite", headers=headers, timeout=60).status_code)

    sim.add_fault("hang", site="site-a", seconds=3600, path_regex="localsite")
    asker = threading.Thread(target=ask)
    asker.start()
    wait_until(lambda: sim.calls("site-a").get("GET /v1/localsite", 0) >= 1)
    assert answers == []  # held while the fault is there
    sim.clear_faults()
    asker.join(60)
    assert answers == [200]


def test_a_hung_insert_still_inserts(sim: SimHandle, zvm_a: Zvm) -> None:
    sim.add_fault("hang", seconds=5, path_regex="/checkpoints$", method="POST", count=1)
    vpg = zvm_a.vpg_id("vpg-db")
    with pytest.raises(requests.exceptions.ReadTimeout):
        zvm_a.http.post(
            f"{zvm_a.base}/v1/vpgs/{vpg}/checkpoints",
            json={"checkpointName": "cut-off"},
            headers={"Authorization": f"Bearer {zvm_a.token}"},
            timeout=0.5,
        )
    wait_until(lambda: _tags(zvm_a, vpg) == ["cut-off"])


def test_latency_applies_per_site(sim: SimHandle, zvm_a: Zvm, zvm_b: Zvm) -> None:
    sim.set_latency(5000, site="site-a")
    with pytest.raises(requests.exceptions.ReadTimeout):
        zvm_a.http.get(zvm_a.base + "/v1/localsite", headers={"Authorization": f"Bearer {zvm_a.token}"}, timeout=0.5)
    assert zvm_b.request("GET", "v1/localsite").status_code == 200
    sim.set_latency(0, site="site-a")
    assert zvm_a.request("GET", "v1/localsite").status_code == 200


def test_mount_fail(sim: SimHandle, zvm_b: Zvm) -> None:
    sim.add_fault("mount_fail", site="site-b")
    session = zvm_b.mount("vpg-web", "web01", zvm_b.latest_checkpoint("vpg-web"))
    assert zvm_b.wait_mounted(session) == "MountFailed"
    browse = zvm_b.request("POST", f"v1/flrs/{session}/browse", json={"path": ""})
    assert browse.status_code == 400


def test_mount_delay(sim: SimHandle, zvm_b: Zvm) -> None:
    sim.add_fault("mount_delay", seconds=60)
    session = zvm_b.mount("vpg-web", "web01", zvm_b.latest_checkpoint("vpg-web"))
    sim.advance_clock(30)  # far past an undelayed mount's 0.3 s
    assert zvm_b.get(f"v1/flrs/{session}")[0]["FlrSessionStatus"] == "MountInProgress"
    sim.advance_clock(30)
    assert zvm_b.get(f"v1/flrs/{session}")[0]["FlrSessionStatus"] == "MountCompletedSuccessfully"


def test_unmount_fail_keeps_the_session(sim: SimHandle, zvm_b: Zvm) -> None:
    session = zvm_b.mount("vpg-web", "web01", zvm_b.latest_checkpoint("vpg-web"))
    sim.add_fault("unmount_fail", count=1)
    failed = zvm_b.request("DELETE", f"v1/flrs/{session}")
    assert failed.status_code == 500
    assert failed.json()["Message"]
    assert [s["FlrSessionIdentifier"] for s in zvm_b.get("v1/flrs")] == [session]
    assert zvm_b.request("DELETE", f"v1/flrs/{session}").status_code == 200


def test_mount_unparseable_still_opens_the_session(sim: SimHandle, zvm_b: Zvm) -> None:
    sim.add_fault("mount_unparseable")
    vpg, vm, cp = zvm_b.vpg_id("vpg-web"), zvm_b.vm_id("web01"), zvm_b.latest_checkpoint("vpg-web")
    resp = zvm_b.request(
        "POST", "v1/flrs", json={"jflr": {"vpgIdentifier": vpg, "vmIdentifier": vm, "checkpointIdentifier": cp}}
    )
    assert resp.status_code == 200
    try:
        parsed = resp.json()
    except ValueError:
        parsed = None
    assert not isinstance(parsed, str)
    sessions = zvm_b.get("v1/flrs")
    assert len(sessions) == 1
    assert (sessions[0]["VmIdentifier"], sessions[0]["VpgIdentifier"], sessions[0]["CheckpointIdentifier"]) == (
        vm,
        vpg,
        cp,
    )


def test_restart_drops_sessions_and_tokens(sim: SimHandle, zvm_a: Zvm, zvm_b: Zvm) -> None:
    zvm_b.mount("vpg-web", "web01", zvm_b.latest_checkpoint("vpg-web"))
    sim.add_fault("restart", site="site-b")
    assert zvm_b.request("GET", "v1/flrs").status_code == 401
    assert zvm_a.request("GET", "v1/flrs").status_code == 200
    zvm_b.token = zvm_b.login()
    assert zvm_b.get("v1/flrs") == []
    assert sim.sessions("site-b") == []


def test_faults_are_listed_validated_and_cleared(sim: SimHandle) -> None:
    added = sim.add_fault("mount_delay", site="site-b", seconds=2, count=3)
    assert (added["kind"], added["site"], added["count"], added["seconds"]) == ("mount_delay", "site-b", 3, 2)
    assert [f["kind"] for f in sim.control("GET", "faults")] == ["mount_delay"]
    for bad in (
        {"kind": "nope"},
        {"kind": "mount_delay"},
        {"kind": "task_delay", "seconds": "soon"},
        {"kind": "http_error", "status": 503, "path_regex": "("},
        {"kind": "mount_fail", "site": "site-zz"},
    ):
        with pytest.raises(SimError, match="400"):
            sim.control("POST", "faults", bad)
    sim.clear_faults()
    assert sim.control("GET", "faults") == []
