"""The simulator's variants: each undocumented behaviour, per site, set at run time and on the command line."""

from __future__ import annotations

import io
import zipfile
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from pathlib import Path

import pytest
import requests

from tests.fixtures import wait_until
from tests.simfixtures import PASSWORD, SimError, SimHandle, run_sim
from tests.zvmsim.support import Zvm

NGINX_PATH = "partition#2 Ext4/etc/nginx/nginx.conf"


def mounted(zvm: Zvm, vpg: str, vm: str) -> str:
    session = zvm.mount(vpg, vm, zvm.latest_checkpoint(vpg))
    zvm.wait_mounted(session)
    return session


def test_defaults_are_the_documented_guesses_and_reset_restores_them(sim: SimHandle) -> None:
    base = sim.variants("site-b")
    assert (
        base["browse_missing_status"],
        base["ntfs_case"],
        base["download_url"],
        base["download_format"],
        base["flr_get_shape"],
        base["mounted_state"],
        base["clock_offset_s"],
    ) == (404, "insensitive", "relative", "raw", "array", "MountCompletedSuccessfully", 0.0)
    sim.set_variants("site-b", browse_missing_status=400)
    assert sim.variants("site-b")["browse_missing_status"] == 400
    assert sim.variants("site-a")["browse_missing_status"] == 404  # per site
    sim.reset()
    assert sim.variants("site-b") == base


def test_bad_variants_are_refused_and_change_nothing(sim: SimHandle) -> None:
    before = sim.control("GET", "variants")
    for bad in (
        {"browse_missing_status": 500},
        {"ntfs_case": "maybe"},
        {"token_ttl_s": 0},
        {"clock_offset_s": "soon"},
        {"mounted_state": ""},
        {"nope": 1},
        {"preset": "nope"},
        {"site": "site-zz", "download_url": "absolute"},
        {"download_format": True},
        {"browse_item_path": "relative"},
        {"browse_times": False},
        {"browse_missing_status": 400, "ntfs_case": "maybe"},
    ):
        with pytest.raises(SimError, match="400"):
            sim.control("POST", "variants", {"site": None, **bad})
    assert sim.control("GET", "variants") == before


def test_a_missing_browse_path_answers_the_variant_status(sim: SimHandle, zvm_b: Zvm) -> None:
    session = mounted(zvm_b, "vpg-web", "web01")
    sim.set_variants("site-b", browse_missing_status=400)
    resp = zvm_b.request("POST", f"v1/flrs/{session}/browse", json={"path": "partition#1 Ext4/etc/nginx"})
    assert resp.status_code == 400
    assert resp.json() == {"Message": "Path 'partition#1 Ext4/etc/nginx' was not found"}


def test_a_browse_can_name_items_bare_and_leave_out_their_times(sim: SimHandle, zvm_b: Zvm) -> None:
    session = mounted(zvm_b, "vpg-web", "web01")
    folder = {"path": "partition#2 Ext4/var/www/html"}
    full = zvm_b.post(f"v1/flrs/{session}/browse", folder)["PathItems"]
    assert "partition#2 Ext4/var/www/html/index.html" in [i["Path"] for i in full]
    assert all(i["LastWriteTime"] for i in full)
    sim.set_variants("site-b", preset="browse-names")
    bare = zvm_b.post(f"v1/flrs/{session}/browse", folder)["PathItems"]
    assert sorted(i["Path"] for i in bare) == sorted(i["Path"].rpartition("/")[2] for i in full)
    sim.set_variants("site-b", preset="browse-no-times")
    timeless = zvm_b.post(f"v1/flrs/{session}/browse", folder)["PathItems"]
    assert [(i["LastWriteTime"], i["CreationTime"]) for i in timeless] == [(None, None)] * len(full)


def test_ntfs_names_can_be_case_sensitive(sim: SimHandle, zvm_a: Zvm) -> None:
    session = mounted(zvm_a, "vpg-win", "win01")
    path = {"path": "partition#2 NTFS/INETPUB"}
    assert zvm_a.request("POST", f"v1/flrs/{session}/browse", json=path).status_code == 200
    sim.set_variants("site-a", ntfs_case="sensitive")
    assert zvm_a.request("POST", f"v1/flrs/{session}/browse", json=path).status_code == 404
    listed = zvm_a.post(f"v1/flrs/{session}/browse", {"path": "partition#2 NTFS/inetpub"})
    assert "partition#2 NTFS/inetpub/web.config" in [i["Path"] for i in listed["PathItems"]]


@pytest.mark.parametrize(
    ("naming", "member"), [("path", "etc/nginx/nginx.conf"), ("flr_path", NGINX_PATH), ("basename", "nginx.conf")]
)
def test_zip_members_are_named_as_the_variant_says(sim: SimHandle, zvm_b: Zvm, naming: str, member: str) -> None:
    session = mounted(zvm_b, "vpg-web", "web01")
    sim.set_variants("site-b", download_format="zip", zip_member=naming)
    url = zvm_b.post(f"v1/flrs/{session}/download", {"pathList": [NGINX_PATH]})
    with zipfile.ZipFile(io.BytesIO(zvm_b.request("GET", url).content)) as zf:
        assert zf.namelist() == [member]


@pytest.mark.parametrize("pending", [404, 409])
def test_a_delayed_download_answers_pending_until_ready(sim: SimHandle, zvm_b: Zvm, pending: int) -> None:
    session = mounted(zvm_b, "vpg-web", "web01")
    sim.set_variants("site-b", download_ready_after_s=60.0, download_pending_status=pending)
    url = zvm_b.post(f"v1/flrs/{session}/download", {"pathList": [NGINX_PATH]})
    first = zvm_b.request("GET", url)
    assert first.status_code == pending
    assert "being prepared" in first.json()["Message"]
    sim.advance_clock(60)
    ready = zvm_b.request("GET", url)
    assert ready.status_code == 200
    assert b"server_name web01" in ready.content


def test_state_names_and_unmounted_sessions_that_stay_listed(sim: SimHandle, zvm_b: Zvm) -> None:
    sim.set_variants("site-b", mounted_state="MountReady", unmounted_state="NotMounted", unmounted_linger_s=60)
    session = zvm_b.mount("vpg-web", "web01", zvm_b.latest_checkpoint("vpg-web"))
    wait_until(lambda: zvm_b.get(f"v1/flrs/{session}")[0]["FlrSessionStatus"] == "MountReady", 30)
    assert zvm_b.request("DELETE", f"v1/flrs/{session}").status_code == 200
    wait_until(lambda: zvm_b.get(f"v1/flrs/{session}")[0]["FlrSessionStatus"] == "NotMounted", 30)
    assert [s["FlrSessionStatus"] for s in zvm_b.get("v1/flrs")] == ["NotMounted"]
    browse = zvm_b.request("POST", f"v1/flrs/{session}/browse", json={"path": ""})
    assert browse.status_code == 400  # listed, but not mounted


def test_token_lifetime_is_per_site(sim: SimHandle) -> None:
    sim.set_variants("site-a", token_ttl_s=7)
    resp = requests.post(
        f"{sim.site_url('site-a')}/auth/realms/zerto/protocol/openid-connect/token",
        data={
            "grant_type": "password",
            "client_id": "zerto-client",
            "username": "admin",
            "password": PASSWORD,
        },
        verify=False,
        timeout=30,
    )
    assert resp.json()["expires_in"] == 7
    other = requests.post(
        f"{sim.site_url('site-b')}/auth/realms/zerto/protocol/openid-connect/token",
        data={
            "grant_type": "password",
            "client_id": "zerto-client",
            "username": "admin",
            "password": PASSWORD,
        },
        verify=False,
        timeout=30,
    )
    assert other.json()["expires_in"] == 300


def _iso(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_a_site_clock_shifts_every_time_it_shows_and_reads(sim: SimHandle, zvm_a: Zvm) -> None:
    sim.set_variants("site-a", clock_offset_s=-300)
    now = datetime.now(UTC)
    resp = zvm_a.request("GET", "v1/localsite")
    shown = parsedate_to_datetime(resp.headers["Date"])
    assert abs((shown - now).total_seconds() + 300) < 30
    vpg = zvm_a.vpg_id("vpg-db")
    task = zvm_a.wait_task(zvm_a.post(f"v1/vpgs/{vpg}/checkpoints", {"checkpointName": "skewed"}))
    assert abs((_iso(task["Started"]) - now).total_seconds() + 300) < 30

    def tagged(start: datetime) -> list[dict[str, object]]:
        rows = zvm_a.get(f"v1/vpgs/{vpg}/checkpoints", params={"startDate": start.strftime("%Y-%m-%dT%H:%M:%SZ")})
        return [r for r in rows if r["Tag"] == "skewed"]

    (listed,) = wait_until(lambda: tagged(now - timedelta(minutes=10)), 30)
    assert abs((_iso(str(listed["TimeStamp"])) - now).total_seconds() + 300) < 30
    # A window from our clock's "one minute ago" lies in this ZVM's future: nothing in it.
    assert tagged(now - timedelta(minutes=1)) == []
    started_after = (now - timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert zvm_a.get("v1/tasks", params={"startedAfterDate": started_after}) == []
    # Another site keeps the true time.
    assert (
        abs(
            (
                parsedate_to_datetime(sim.http.get(sim.site_url("site-b") + "/v1/localsite").headers["Date"]) - now
            ).total_seconds()
        )
        < 30
    )


def test_the_peak_request_rate_is_counted_per_site(sim: SimHandle, zvm_b: Zvm) -> None:
    before = sim.rate("site-b")
    for _ in range(5):
        zvm_b.get("v1/localsite")
    after = sim.rate("site-b")
    assert after["requests"] == before["requests"] + 5
    assert after["peak_per_s"] >= 1
    assert sim.rate("site-c")["requests"] == 0


@pytest.mark.process
def test_variants_come_from_the_command_line(tmp_path: Path) -> None:
    with run_sim(
        tmp_path,
        "--preset",
        "browse-400",
        "--variant",
        "zip_member=basename",
        "--variant",
        "unmounted_state=NotMounted",
        "--clock-offset",
        "-60",
        "--token-ttl",
        "9",
    ) as server:
        handle = SimHandle(server)
        got = handle.variants("site-c")
        assert (
            got["browse_missing_status"],
            got["zip_member"],
            got["unmounted_state"],
            got["clock_offset_s"],
            got["token_ttl_s"],
        ) == (400, "basename", "NotMounted", -60.0, 9.0)
        handle.set_variants(browse_missing_status=404)
        handle.reset()  # back to the command line's values, not the built-in defaults
        assert handle.variants("site-c")["browse_missing_status"] == 400


@pytest.mark.process
def test_a_bad_command_line_variant_stops_the_simulator(tmp_path: Path) -> None:
    with pytest.raises(SimError, match="exited"):
        with run_sim(tmp_path, "--variant", "ntfs_case=maybe"):
            pass
