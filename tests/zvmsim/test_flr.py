"""File Level Recovery: capture semantics, mount, browse, download, unmount, foreign sessions."""

from __future__ import annotations

import hashlib
import io
import zipfile

from tests.fixtures import wait_until
from tests.simfixtures import SimHandle
from tests.zvmsim.support import NGINX_PATH, Zvm, download, mounted


def test_a_checkpoint_keeps_the_file_as_it_was(sim: SimHandle, zvm_a: Zvm, zvm_b: Zvm) -> None:
    sim.set_file("web01", "/etc/nginx/nginx.conf", text="good config\n")
    cp = zvm_a.insert_checkpoint("vpg-web", "before-change")
    sim.set_file("web01", "/etc/nginx/nginx.conf", text="broken config\n")
    assert sim.read_file("web01", "/etc/nginx/nginx.conf") == b"broken config\n"
    session = mounted(zvm_b, "vpg-web", "web01", cp)
    assert download(zvm_b, session, NGINX_PATH) == b"good config\n"


def test_journal_checkpoints_hold_the_seed_tree(sim: SimHandle, zvm_b: Zvm) -> None:
    # The latest is a seeded one (not an automatic one taken after the change on a slow run).
    sim.set_auto_checkpoints(0, "vpg-web")
    original = sim.read_file("web01", "/etc/nginx/nginx.conf")
    assert b"server_name web01" in original
    sim.set_file("web01", "/etc/nginx/nginx.conf", text="changed\n")
    session = mounted(zvm_b, "vpg-web", "web01", zvm_b.latest_checkpoint("vpg-web"))
    assert download(zvm_b, session, NGINX_PATH) == original


def test_browse_lists_partitions_folders_and_files(zvm_b: Zvm) -> None:
    session = mounted(zvm_b, "vpg-web", "web01", zvm_b.latest_checkpoint("vpg-web"))
    root = zvm_b.post(f"v1/flrs/{session}/browse", {"path": ""})
    assert root["MainPathItem"]["Path"] == ""
    assert [(i["Path"], i["Type"], i["SizeInBytes"]) for i in root["PathItems"]] == [
        ("partition#1 Ext4", "Partition", None),
        ("partition#2 Ext4", "Partition", None),
    ]
    boot = zvm_b.post(f"v1/flrs/{session}/browse", {"path": "partition#1 Ext4"})
    assert {(i["Path"], i["Type"]) for i in boot["PathItems"]} == {
        ("partition#1 Ext4/grub", "Folder"),
        ("partition#1 Ext4/vmlinuz", "File"),
    }
    top = zvm_b.post(f"v1/flrs/{session}/browse", {"Path": "partition#2 Ext4"})
    assert {i["Path"] for i in top["PathItems"]} >= {
        "partition#2 Ext4/boot",
        "partition#2 Ext4/etc",
        "partition#2 Ext4/var",
    }
    empty_boot = zvm_b.post(f"v1/flrs/{session}/browse", {"path": "partition#2 Ext4/boot"})
    assert empty_boot["MainPathItem"]["Type"] == "Folder"
    assert empty_boot["PathItems"] == []
    nginx = zvm_b.post(f"v1/flrs/{session}/browse", {"path": "partition#2 Ext4/etc/nginx"})
    item = nginx["PathItems"][0]
    assert item["Path"] == NGINX_PATH
    assert item["Type"] == "File"
    assert item["SizeInBytes"] > 0
    assert item["DownloadInformation"]["IsDownloadable"] is True
    assert item["LastWriteTime"].endswith("Z")
    one_file = zvm_b.post(f"v1/flrs/{session}/browse", {"path": NGINX_PATH})
    assert one_file["MainPathItem"]["Type"] == "File"
    assert one_file["PathItems"] == []


def test_browse_and_download_refuse_absent_paths_and_folders(zvm_b: Zvm) -> None:
    session = mounted(zvm_b, "vpg-web", "web01", zvm_b.latest_checkpoint("vpg-web"))
    missing = zvm_b.request("POST", f"v1/flrs/{session}/browse", json={"path": "partition#2 Ext4/nope"})
    assert missing.status_code == 404
    assert missing.json()["Message"]
    no_part = zvm_b.request("POST", f"v1/flrs/{session}/browse", json={"path": "partition#9 Ext4"})
    assert no_part.status_code == 404
    backslash = zvm_b.request("POST", f"v1/flrs/{session}/browse", json={"path": "partition#2 Ext4\\etc"})
    assert backslash.status_code == 400
    folder = zvm_b.request("POST", f"v1/flrs/{session}/download", json={"pathList": ["partition#2 Ext4/etc"]})
    assert folder.status_code == 400
    assert "only files" in folder.json()["Message"]
    absent = zvm_b.request("POST", f"v1/flrs/{session}/download", json={"pathList": ["partition#2 Ext4/x"]})
    assert absent.status_code == 404
    empty = zvm_b.request("POST", f"v1/flrs/{session}/download", json={"pathList": []})
    assert empty.status_code == 400


def test_windows_partitions_and_paths(sim: SimHandle, zvm_a: Zvm) -> None:
    cp = zvm_a.latest_checkpoint("vpg-win")  # win01 is recovered at site-a
    session = mounted(zvm_a, "vpg-win", "win01", cp)
    root = zvm_a.post(f"v1/flrs/{session}/browse", {"path": ""})
    assert [i["Path"] for i in root["PathItems"]] == ["partition#1 NTFS", "partition#2 NTFS", "partition#3 NTFS"]
    reserved = zvm_a.post(f"v1/flrs/{session}/browse", {"path": "partition#1 NTFS"})
    assert "partition#1 NTFS/bootmgr" in {i["Path"] for i in reserved["PathItems"]}
    web_config = download(zvm_a, session, "partition#2 NTFS/inetpub/web.config")
    assert web_config == sim.read_file("win01", "C:\\inetpub\\web.config")
    report = download(zvm_a, session, "partition#3 NTFS/data/report.csv")
    assert report.startswith(b"date,region")
    hosts = download(zvm_a, session, "partition#2 NTFS/Windows/System32/drivers/etc/hosts")
    assert b"win01" in hosts


def test_raw_download_with_a_relative_url_is_the_default(zvm_b: Zvm) -> None:
    session = mounted(zvm_b, "vpg-web", "web01", zvm_b.latest_checkpoint("vpg-web"))
    url = zvm_b.post(f"v1/flrs/{session}/download", {"pathList": [NGINX_PATH]})
    assert url.startswith("v1/downloads/")
    resp = zvm_b.request("GET", url)
    assert resp.headers["content-type"] == "application/octet-stream"
    assert b"server_name web01" in resp.content
    # Joined against a base URL without its trailing slash, the link still resolves.
    assert zvm_b.request("GET", f"{zvm_b.sim.url}/{url}").content == resp.content
    # It needs the Bearer like every /v1 call.
    assert zvm_b.http.get(f"{zvm_b.base}/{url}", timeout=30).status_code == 401


def test_zip_and_absolute_downloads_by_variant(sim: SimHandle, zvm_b: Zvm) -> None:
    sim.set_variants(download_format="zip", download_url="absolute")
    session = mounted(zvm_b, "vpg-web", "web01", zvm_b.latest_checkpoint("vpg-web"))
    url = zvm_b.post(f"v1/flrs/{session}/download", {"pathList": [NGINX_PATH]})
    assert url.startswith(f"{zvm_b.base}/v1/downloads/")
    resp = zvm_b.request("GET", url)
    assert resp.headers["content-type"] == "application/zip"
    assert resp.content[:4] == b"PK\x03\x04"
    with zipfile.ZipFile(io.BytesIO(resp.content)) as zf:
        assert zf.testzip() is None
        (name,) = zf.namelist()
        assert name == "etc/nginx/nginx.conf"
        assert b"server_name web01" in zf.read(name)


def test_a_large_generated_file_streams_raw_and_zipped(sim: SimHandle, zvm_a: Zvm, zvm_b: Zvm) -> None:
    size = 5 * 1024 * 1024 + 17
    sim.set_file("db01", "/var/lib/mysql/big.ibd", size=size, seed=7)
    live = sim.read_file("db01", "/var/lib/mysql/big.ibd")
    assert len(live) == size
    cp = zvm_a.insert_checkpoint("vpg-db", "big")
    session = mounted(zvm_b, "vpg-db", "db01", cp)
    raw = download(zvm_b, session, "partition#1 Ext4/var/lib/mysql/big.ibd")
    assert hashlib.sha256(raw).digest() == hashlib.sha256(live).digest()
    sim.set_variants("site-b", download_format="zip")
    zipped = download(zvm_b, session, "partition#1 Ext4/var/lib/mysql/big.ibd")
    with zipfile.ZipFile(io.BytesIO(zipped)) as zf:
        assert zf.read("var/lib/mysql/big.ibd") == live


def test_several_paths_come_back_as_one_zip(zvm_b: Zvm) -> None:
    session = mounted(zvm_b, "vpg-web", "web01", zvm_b.latest_checkpoint("vpg-web"))
    url = zvm_b.post(f"v1/flrs/{session}/download", {"pathList": [NGINX_PATH, "partition#2 Ext4/etc/hostname"]})
    with zipfile.ZipFile(io.BytesIO(zvm_b.request("GET", url).content)) as zf:
        assert sorted(zf.namelist()) == ["etc/hostname", "etc/nginx/nginx.conf"]
        assert zf.read("etc/hostname") == b"web01\n"


def test_session_listing_and_both_get_shapes(sim: SimHandle, zvm_b: Zvm) -> None:
    cp = zvm_b.latest_checkpoint("vpg-web")
    session = mounted(zvm_b, "vpg-web", "web01", cp)
    listed = zvm_b.get("v1/flrs")
    assert [s["FlrSessionIdentifier"] for s in listed] == [session]
    info = listed[0]
    assert info["VmIdentifier"] == zvm_b.vm_id("web01")
    assert info["VpgIdentifier"] == zvm_b.vpg_id("vpg-web")
    assert info["CheckpointIdentifier"] == cp
    assert info["SiteIdentifier"] == zvm_b.get("v1/localsite")["SiteIdentifier"]
    assert info["FlrSessionType"] == "jflr"
    assert zvm_b.get("v1/flrs", params={"vmIdentifier": zvm_b.vm_id("db01")}) == []
    assert zvm_b.get("v1/flrs", params={"VMIDENTIFIER": zvm_b.vm_id("web01")}) == listed
    as_array = zvm_b.get(f"v1/flrs/{session}")
    assert isinstance(as_array, list)
    assert as_array[0] == info
    sim.set_variants("site-b", flr_get_shape="object")
    assert zvm_b.get(f"v1/flrs/{session}") == info


def test_unmount_passes_through_unmounting_then_the_session_is_gone(zvm_b: Zvm) -> None:
    session = mounted(zvm_b, "vpg-web", "web01", zvm_b.latest_checkpoint("vpg-web"))
    url = zvm_b.post(f"v1/flrs/{session}/download", {"pathList": [NGINX_PATH]})
    resp = zvm_b.request("DELETE", f"v1/flrs/{session}")
    assert resp.status_code == 200
    task_id = resp.json()
    assert isinstance(task_id, str)
    assert "." in task_id
    status = zvm_b.request("GET", f"v1/flrs/{session}")
    assert status.status_code == 404 or status.json()[0]["FlrSessionStatus"] == "UnmountInProgress"
    wait_until(lambda: zvm_b.request("GET", f"v1/flrs/{session}").status_code == 404)
    assert zvm_b.get("v1/flrs") == []
    assert zvm_b.wait_task(task_id)["Status"]["State"] == 6
    assert zvm_b.request("GET", url).status_code == 404  # the link died with the session


def test_mount_validates_its_input(sim: SimHandle, zvm_a: Zvm, zvm_b: Zvm) -> None:
    vpg, vm, cp = zvm_b.vpg_id("vpg-web"), zvm_b.vm_id("web01"), zvm_b.latest_checkpoint("vpg-web")
    cases = [
        {
            "jflr": {
                "vpgIdentifier": "00000000-0000-4000-8000-000000000000",
                "vmIdentifier": vm,
                "checkpointIdentifier": cp,
            }
        },
        {"jflr": {"vpgIdentifier": vpg, "vmIdentifier": zvm_b.vm_id("db01"), "checkpointIdentifier": cp}},
        {"jflr": {"vpgIdentifier": vpg, "vmIdentifier": vm, "checkpointIdentifier": "1"}},
        {"jflr": {"vpgIdentifier": vpg, "vmIdentifier": vm}},
        {"bflr": {"vpgIdentifier": vpg}},
    ]
    for body in cases:
        resp = zvm_b.request("POST", "v1/flrs", json=body)
        assert resp.status_code == 400, body
        assert resp.json()["Message"]
    protected_side = zvm_a.request(
        "POST", "v1/flrs", json={"jflr": {"vpgIdentifier": vpg, "vmIdentifier": vm, "checkpointIdentifier": cp}}
    )
    assert protected_side.status_code == 400
    assert "recovery site" in protected_side.json()["Message"]
    assert zvm_b.get("v1/flrs") == []


def test_browse_waits_for_the_mount(sim: SimHandle, zvm_b: Zvm) -> None:
    sim.add_fault("mount_delay", seconds=30)
    session = zvm_b.mount("vpg-web", "web01", zvm_b.latest_checkpoint("vpg-web"))
    assert zvm_b.get(f"v1/flrs/{session}")[0]["FlrSessionStatus"] == "MountInProgress"
    resp = zvm_b.request("POST", f"v1/flrs/{session}/browse", json={"path": ""})
    assert resp.status_code == 400
    assert "not mounted" in resp.json()["Message"]


def test_foreign_sessions_show_up_in_the_api_and_in_control(sim: SimHandle, zvm_b: Zvm) -> None:
    foreign = sim.open_foreign_session("site-b", "db01", "vpg-db")
    mine = zvm_b.mount("vpg-web", "web01", zvm_b.latest_checkpoint("vpg-web"))
    ids = {s["FlrSessionIdentifier"] for s in zvm_b.get("v1/flrs")}
    assert ids == {foreign, mine}
    control = {s["session_id"]: s for s in sim.sessions("site-b")}
    assert control[foreign]["foreign"] is True
    assert control[mine]["foreign"] is False
    assert control[foreign]["vm"] == "db01"
    assert control[foreign]["vpg"] == "vpg-db"
    assert sim.sessions("site-a") == []
    wait_until(lambda: zvm_b.get(f"v1/flrs/{foreign}")[0]["FlrSessionStatus"] == "MountCompletedSuccessfully")


def test_reset_drops_sessions_tasks_tokens_and_faults(sim: SimHandle, zvm_b: Zvm) -> None:
    zvm_b.mount("vpg-web", "web01", zvm_b.latest_checkpoint("vpg-web"))
    sim.add_fault("mount_fail")
    sim.set_file("web01", "/etc/hostname", text="changed\n")
    sim.reset()
    assert sim.sessions("site-b") == []
    assert sim.control("GET", "faults") == []
    assert zvm_b.request("GET", "v1/flrs").status_code == 401
    assert sim.read_file("web01", "/etc/hostname") == b"web01\n"
