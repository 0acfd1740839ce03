"""/v1/vms and /v1/vpgs: filters, one row per (VM, VPG), per-site typing of site links."""

from __future__ import annotations

import pytest

from tests.simfixtures import SimError, SimHandle
from tests.zvmsim.support import Zvm


def _pairs(rows: list[dict]) -> set[tuple[str, str]]:
    return {(r["VmName"], r["VpgName"]) for r in rows}


def test_a_vm_in_two_vpgs_has_two_rows(zvm_a: Zvm) -> None:
    rows = zvm_a.get("v1/vms", params={"vmName": "web01"})
    assert _pairs(rows) == {("web01", "vpg-web"), ("web01", "vpg-web-dr")}
    assert len({r["VmIdentifier"] for r in rows}) == 1
    row = rows[0]
    assert row["VmIdentifier"].endswith(".vm-101")
    assert row["ProtectedSiteName"] == "Site A"
    assert row["RecoverySiteName"] == "Site B"
    assert row["EnabledActions"]["IsFlrEnabled"] is True
    assert row["VmNetworkInformation"]["NetworkAdapters"][0]["IpAddresses"] == ["10.0.0.11"]
    assert row["Link"]["identifier"] == f"{row['VmIdentifier']}?VpgIdentifier={row['VpgIdentifier']}"
    assert row["Status"] == 1
    assert row["SubStatus"] == 0


def test_site_links_are_typed_relative_to_the_site_called(sim: SimHandle, zvm_a: Zvm, zvm_b: Zvm) -> None:
    ids = {s["slug"]: s["identifier"] for s in sim.state()["sites"]}
    on_a = zvm_a.get("v1/vms", params={"vmName": "db01"})[0]
    on_b = zvm_b.get("v1/vms", params={"vmName": "db01"})[0]
    assert (on_a["ProtectedSite"]["type"], on_a["RecoverySite"]["type"]) == ("LocalSiteApi", "PeerSiteApi")
    assert (on_b["ProtectedSite"]["type"], on_b["RecoverySite"]["type"]) == ("PeerSiteApi", "LocalSiteApi")
    assert on_a["ProtectedSite"]["identifier"] == on_b["ProtectedSite"]["identifier"] == ids["site-a"]
    assert on_b["RecoverySite"]["identifier"] == ids["site-b"]
    win = zvm_a.get("v1/vms", params={"vmName": "win01"})[0]
    assert (win["ProtectedSite"]["type"], win["RecoverySite"]["type"]) == ("PeerSiteApi", "LocalSiteApi")


def test_a_site_lists_only_vpgs_it_protects_or_recovers(sim: SimHandle) -> None:
    a, b, c, aws = (Zvm(sim, s) for s in ("site-a", "site-b", "site-c", "site-aws"))
    assert _pairs(c.get("v1/vms")) == {("app01", "vpg-app-3"), ("edge01", "vpg-edge")}
    assert _pairs(aws.get("v1/vms")) == {("cloud01", "vpg-cloud")}
    assert {r["VpgName"] for r in a.get("v1/vms", params={"vmName": "app01"})} == {
        "vpg-app-1",
        "vpg-app-2",
        "vpg-app-3",
    }
    assert {r["VpgName"] for r in b.get("v1/vms", params={"vmName": "app01"})} == {"vpg-app-1", "vpg-app-2"}
    assert b.get("v1/vms", params={"vmName": "edge01"})[0]["ProtectedSiteName"] == "Site C"
    assert a.get("v1/vms", params={"vmName": "edge01"}) == []
    assert ("cloud01", "vpg-cloud") in _pairs(b.get("v1/vms"))


def test_vms_filter_by_identifier_and_vpg_name(zvm_a: Zvm) -> None:
    app = zvm_a.vm_id("app01")
    by_id = zvm_a.get("v1/vms", params={"vmIdentifier": app})
    assert len(by_id) == 3
    assert {r["VmName"] for r in by_id} == {"app01"}
    by_vpg = zvm_a.get("v1/vms", params={"vpgName": "vpg-app-2"})
    assert _pairs(by_vpg) == {("app01", "vpg-app-2")}
    both = zvm_a.get("v1/vms", params={"vmName": "app01", "vpgName": "vpg-app-3"})
    assert _pairs(both) == {("app01", "vpg-app-3")}
    assert zvm_a.get("v1/vms", params={"vmName": "nope"}) == []


def test_two_vms_can_share_a_name(sim: SimHandle, zvm_a: Zvm) -> None:
    rows = zvm_a.get("v1/vms", params={"vmName": "dup01"})
    assert len(rows) == 2
    assert len({r["VmIdentifier"] for r in rows}) == 2
    assert {r["VpgName"] for r in rows} == {"vpg-dup-1", "vpg-dup-2"}
    # The control API refuses to guess between them.
    with pytest.raises(SimError, match="-> 409"):
        sim.vm("dup01")


def test_initial_sync_vm_is_not_flr_enabled(zvm_a: Zvm) -> None:
    row = zvm_a.get("v1/vms", params={"vmName": "newvm01"})[0]
    assert (row["Status"], row["SubStatus"]) == (0, 1)
    assert row["EnabledActions"]["IsFlrEnabled"] is False


def test_one_vm_by_identifier_needs_the_vpg_when_ambiguous(zvm_a: Zvm) -> None:
    web = zvm_a.vm_id("web01")
    assert zvm_a.request("GET", f"v1/vms/{web}").status_code == 400
    vpg = zvm_a.vpg_id("vpg-web-dr")
    row = zvm_a.get(f"v1/vms/{web}", params={"vpgIdentifier": vpg})
    assert row["VpgName"] == "vpg-web-dr"
    db = zvm_a.get(f"v1/vms/{zvm_a.vm_id('db01')}")
    assert db["VmName"] == "db01"


def test_vpgs_list_filter_and_get(sim: SimHandle, zvm_a: Zvm, zvm_b: Zvm) -> None:
    names_a = {v["VpgName"] for v in zvm_a.get("v1/vpgs")}
    assert names_a == {
        "vpg-web",
        "vpg-web-dr",
        "vpg-app-1",
        "vpg-app-2",
        "vpg-app-3",
        "vpg-db",
        "vpg-win",
        "vpg-new",
        "vpg-dup-1",
        "vpg-dup-2",
    }
    one = zvm_a.get("v1/vpgs", params={"name": "vpg-win"})
    assert len(one) == 1
    vpg = one[0]
    assert vpg["ProtectedSite"]["type"] == "PeerSiteApi"
    assert vpg["RecoverySite"]["type"] == "LocalSiteApi"
    assert vpg["ActiveProcessesApi"]["RunningFailOverTestApi"] is None
    assert vpg["HistoryStatusApi"]["EarliestCheckpoint"]["CheckpointIdentifier"]
    same = zvm_b.get(f"v1/vpgs/{vpg['VpgIdentifier']}")
    assert same["VpgName"] == "vpg-win"
    assert same["ProtectedSite"]["type"] == "LocalSiteApi"
    edge = sim.vm("edge01")["vpgs"][0]["identifier"]
    assert zvm_a.request("GET", f"v1/vpgs/{edge}").status_code == 404


def test_control_vm_facts(sim: SimHandle) -> None:
    web = sim.vm("web01")
    assert web["name"] == "web01"
    assert [(v["name"], v["protected"], v["recovery"]) for v in web["vpgs"]] == [
        ("vpg-web", "site-a", "site-b"),
        ("vpg-web-dr", "site-a", "site-b"),
    ]
    assert sim.vm(web["identifier"])["name"] == "web01"


def test_identifiers_are_deterministic_across_resets(sim: SimHandle) -> None:
    before = sim.vm("app01")
    sim.reset()
    assert sim.vm("app01") == before
