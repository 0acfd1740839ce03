"""Routing, case-insensitivity, error shapes, sites."""

from __future__ import annotations

from tests.simfixtures import SimHandle
from tests.zvmsim.support import Zvm


def test_paths_and_query_keys_are_case_insensitive(zvm_a: Zvm) -> None:
    lower = zvm_a.get("v1/vms", params={"vmname": "db01"})
    upper = zvm_a.get("V1/VMs", params={"VMNAME": "db01"})
    assert lower == upper
    assert [r["VmName"] for r in lower] == ["db01"]
    assert zvm_a.get("v1/LOCALSITE")["SiteName"] == "Site A"


def test_slugs_are_case_insensitive(sim: SimHandle, zvm_a: Zvm) -> None:
    resp = zvm_a.request("GET", sim.url + "/SITE-A/v1/localsite")
    assert resp.status_code == 200


def test_body_keys_are_case_insensitive(zvm_a: Zvm) -> None:
    vpg = zvm_a.vpg_id("vpg-db")
    for key in ("checkpointName", "CheckpointName", "checkpointname"):
        task = zvm_a.post(f"v1/vpgs/{vpg}/Checkpoints", {key: f"tag-{key}"})
        assert isinstance(task, str)


def test_unknown_paths_answer_404_with_a_message(sim: SimHandle, zvm_a: Zvm) -> None:
    for url in ("v1/nothing-here", sim.url + "/site-zz/v1/localsite", sim.url + "/_sim/nothing"):
        resp = zvm_a.request("GET", url)
        assert resp.status_code == 404
        assert resp.json()["Message"]


def test_unknown_ids_answer_404(zvm_a: Zvm) -> None:
    for path in (
        "v1/vpgs/00000000-0000-4000-8000-000000000000",
        "v1/tasks/00000000-0000-4000-8000-000000000000.x",
        "v1/flrs/00000000-0000-4000-8000-000000000000.x",
        "v1/vms/nope.vm-1",
    ):
        resp = zvm_a.request("GET", path)
        assert resp.status_code == 404, path
        assert "Message" in resp.json()


def test_a_wrong_method_answers_405(zvm_a: Zvm) -> None:
    resp = zvm_a.request("DELETE", "v1/localsite")
    assert resp.status_code == 405
    assert "Message" in resp.json()


def test_malformed_bodies_answer_400(zvm_a: Zvm) -> None:
    vpg = zvm_a.vpg_id("vpg-db")
    bad = zvm_a.request(
        "POST", f"v1/vpgs/{vpg}/checkpoints", data=b"{not json", headers={"Content-Type": "application/json"}
    )
    assert bad.status_code == 400
    assert "Message" in bad.json()
    empty = zvm_a.request("POST", f"v1/vpgs/{vpg}/checkpoints", json={"checkpointName": ""})
    assert empty.status_code == 400
    wrong_type = zvm_a.request("POST", f"v1/vpgs/{vpg}/checkpoints", json=["x"])
    assert wrong_type.status_code == 400
    flr = zvm_a.request("POST", "v1/flrs", json={"nothing": 1})
    assert flr.status_code == 400


def test_localsite_and_peersites_describe_each_site(sim: SimHandle, zvm_a: Zvm) -> None:
    state = sim.state()
    ids = {s["slug"]: s["identifier"] for s in state["sites"]}
    local = zvm_a.get("v1/localsite")
    assert local["SiteIdentifier"] == ids["site-a"]
    assert local["SiteType"] == "VCenter"
    assert local["Link"]["type"] == "LocalSiteApi"
    peers = zvm_a.get("v1/peersites")
    assert {p["PeerSiteName"] for p in peers} == {"Site B", "Site C", "Site AWS"}
    assert {p["SiteIdentifier"] for p in peers} == {ids["site-b"], ids["site-c"], ids["site-aws"]}
    aws = Zvm(sim, "site-aws").get("v1/localsite")
    assert (aws["SiteName"], aws["SiteType"]) == ("Site AWS", "AWS")


def test_state_lists_all_four_sites(sim: SimHandle) -> None:
    state = sim.state()
    assert [s["slug"] for s in state["sites"]] == ["site-a", "site-b", "site-c", "site-aws"]
    assert all(s["base_url"] == f"{sim.url}/{s['slug']}" for s in state["sites"])
    assert state["vms"] == 9
    assert state["vpgs"] == 12


def test_status_names_come_in_enum_order(zvm_a: Zvm) -> None:
    statuses = zvm_a.get("v1/vpgs/statuses")
    assert statuses[:5] == ["Initializing", "MeetingSLA", "NotMeetingSLA", "HistoryNotMeetingSLA", "RpoNotMeetingSLA"]
    subs = zvm_a.get("v1/vpgs/substatuses")
    assert subs[1] == "InitialSync"
    assert subs[28] == "Backup"


def test_calls_are_counted_by_template(sim: SimHandle, zvm_a: Zvm) -> None:
    zvm_a.get("v1/vms", params={"vmName": "web01"})
    zvm_a.get("v1/vms", params={"vmName": "db01"})
    vpg = zvm_a.vpg_id("vpg-db")
    zvm_a.get(f"v1/vpgs/{vpg}/checkpoints")
    calls = sim.calls("site-a")
    assert calls["GET /v1/vms"] == 2
    assert calls["GET /v1/vpgs/{vpg_id}/checkpoints"] == 1
    assert calls["POST /auth/realms/zerto/protocol/openid-connect/token"] == 1
    assert sim.calls("site-b") == {}


def test_the_certificate_verifies_against_the_ca_bundle(sim: SimHandle) -> None:
    import requests

    assert sim.ca_bundle
    pinned = requests.Session()
    pinned.trust_env = False
    resp = pinned.get(sim.url + "/_sim/state", verify=sim.ca_bundle, timeout=30)
    assert resp.status_code == 200
    assert resp.json()["ca_bundle"] == sim.ca_bundle
