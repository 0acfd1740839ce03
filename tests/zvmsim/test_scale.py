"""A simulator with 10,000 filler VMs starts and answers filtered lookups from its indices."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.simfixtures import SimHandle, run_sim
from tests.zvmsim.support import Zvm


@pytest.mark.process
def test_it_starts_with_ten_thousand_vms_and_filters_them(tmp_path: Path) -> None:
    with run_sim(tmp_path, "--vms", "10000", "--seed", "7") as server:
        sim = SimHandle(server)
        state = sim.state()
        assert state["vms"] == 10000 + 9
        assert state["vpgs"] >= 10000 // 4
        facts = sim.vm("vm-09999")
        assert 1 <= len(facts["vpgs"]) <= 3
        site = facts["vpgs"][0]["protected"]
        assert site in ("site-a", "site-b", "site-c")
        zvm = Zvm(sim, site)
        rows = zvm.get("v1/vms", params={"vmName": "vm-09999"})
        assert {r["VpgName"] for r in rows} == {v["name"] for v in facts["vpgs"]}
        assert all(r["ProtectedSite"]["type"] == "LocalSiteApi" for r in rows)
        by_id = zvm.get("v1/vms", params={"vmIdentifier": facts["identifier"]})
        assert by_id == rows
        vpg_name = facts["vpgs"][0]["name"]
        members = zvm.get("v1/vms", params={"vpgName": vpg_name})
        assert "vm-09999" in {r["VmName"] for r in members}
        assert len(members) <= 4
        # A filler VM has a guest tree too (built on first use).
        assert sim.read_file(
            "vm-09999", "/etc/hostname" if facts["os"] == "linux" else "C:\\Windows\\System32\\drivers\\etc\\hosts"
        )


@pytest.mark.process
def test_the_same_seed_gives_the_same_filler(tmp_path: Path) -> None:
    with run_sim(tmp_path / "one", "--vms", "50", "--seed", "3", "--http") as one:
        first = SimHandle(one).vm("vm-00050")
    with run_sim(tmp_path / "two", "--vms", "50", "--seed", "3", "--http") as two:
        assert SimHandle(two).vm("vm-00050") == first
