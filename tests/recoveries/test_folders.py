"""A folder comes back (recursive recoveries): the runner in this process, the simulator over HTTPS, real files."""

from __future__ import annotations

import hashlib
import io
import subprocess
import zipfile
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import requests
from django.test import Client
from django.urls import reverse

from recoveries.approver_email import approval_summary
from recoveries.models import RecoveryRequest
from recoveries.services import recovery_request_approve, recovery_request_create
from rewind.agents import agent_token_issue
from rewind.audit import Actor
from rewind.lib.errors import ApplicationError
from rewind.models import Agent, AuditEvent
from tests.helpers import call_tool_async, poll_recovery_status, run, tool_ok, wait_recovery_finished
from tests.mcpfixtures import make_agent_token

pytestmark = pytest.mark.timeout(300)

# Files put under web01's /etc/nginx before the checkpoint, beside its nginx.conf.
NGINX_FILES = {
    "mime.types": "types {\n    text/html html;\n}\n",
    "conf.d/gzip.conf": "gzip on;\n",
    "sites-available/default": "server { listen 80; }\n",
    "sites-available/deep/more/site.conf": "server { listen 8080; }\n",
}
DOWNLOAD = "POST /v1/flrs/{session_id}/download"


def _live(sim: Any, slug: str) -> list[dict[str, Any]]:
    """Sessions still holding a mount (the simulator's own states, whatever names a variant shows)."""
    return [s for s in sim.sessions(slug) if s["status"] in ("MountInProgress", "MountCompletedSuccessfully")]


def _run(inline_tasks: Any, people: Any, agent: Agent, vm: str, path: str) -> RecoveryRequest:
    recovery = recovery_request_create(agent=agent, vm=vm, path=path, reason="my change broke it", recursive=True)
    assert recovery.recursive is True
    recovery_request_approve(recovery_id=recovery.pk, user=people.approver)
    return wait_recovery_finished(recovery, tasks=inline_tasks)


def _nginx_folder(sim: Any) -> dict[str, bytes]:
    """The folder as the checkpoint will hold it: {path below /etc/nginx: bytes}."""
    for rel, text in NGINX_FILES.items():
        sim.set_file("web01", f"/etc/nginx/{rel}", text=text)
    return {rel: sim.read_file("web01", f"/etc/nginx/{rel}") for rel in ["nginx.conf", *NGINX_FILES]}


@pytest.mark.parametrize("variant", ["default", "browse-names", "browse-no-times", "zip-basename", "hostile"])
def test_a_folder_comes_back_whole_with_a_manifest_matching_the_checkpoint(
    inline_tasks, sim, sites, people, agent, tagged, variant
) -> None:
    sim.set_variants(preset=variant)
    before = _nginx_folder(sim)
    tagged("web01")
    # The agent's change: one file rewritten, one deleted, one added; the checkpoint holds the old folder.
    sim.set_file("web01", "/etc/nginx/nginx.conf", text="broken\n")
    sim.delete_file("web01", "/etc/nginx/mime.types")
    sim.set_file("web01", "/etc/nginx/conf.d/new.conf", text="added after the checkpoint\n")

    recovery = _run(inline_tasks, people, agent, "web01", "/etc/nginx/")

    assert recovery.status == RecoveryRequest.Status.SUCCEEDED, recovery.error
    manifest = {e["path"]: e for e in recovery.manifest}
    assert set(manifest) == set(before)
    for rel, data in before.items():
        assert manifest[rel]["sha256"] == hashlib.sha256(data).hexdigest(), rel
        assert manifest[rel]["size"] == len(data)
        assert (manifest[rel]["modified"] is None) == (variant == "browse-no-times")
    # Breadth-first: the folder's own files before those of its subfolders.
    order = [e["path"] for e in recovery.manifest]
    assert (
        order.index("nginx.conf") < order.index("conf.d/gzip.conf") < order.index("sites-available/deep/more/site.conf")
    )
    archive = Path(recovery.stored_path)
    assert recovery.sha256 == hashlib.sha256(archive.read_bytes()).hexdigest()
    with zipfile.ZipFile(archive) as zipped:
        assert {name: zipped.read(name) for name in zipped.namelist()} == before
    assert recovery.unmount_ok is True
    assert _live(sim, "site-b") == []
    assert sim.calls("site-b")["POST /v1/flrs"] == 1  # one mount served the whole folder
    downloaded = AuditEvent.objects.get(target_id=str(recovery.pk), action="recoveries.folder.downloaded")
    assert downloaded.data["files"] == len(before)
    assert downloaded.data["bytes"] == sum(len(b) for b in before.values())
    assert downloaded.data["archive_sha256"] == recovery.sha256


def test_a_windows_folder_comes_back_with_its_subfolders(inline_tasks, sim, sites, people, agent, tagged) -> None:
    before = {
        "web.config": sim.read_file("win01", "C:\\inetpub\\web.config"),
        "wwwroot/index.html": sim.read_file("win01", "C:\\inetpub\\wwwroot\\index.html"),
        "wwwroot/Web.config": sim.read_file("win01", "C:\\inetpub\\wwwroot\\Web.config"),
    }
    tagged("win01")
    sim.set_file("win01", "C:\\inetpub\\web.config", text="clobbered")

    recovery = _run(inline_tasks, people, agent, "win01", "C:\\inetpub\\")

    assert recovery.status == RecoveryRequest.Status.SUCCEEDED, recovery.error
    assert {e["path"]: e["sha256"] for e in recovery.manifest} == {
        rel: hashlib.sha256(data).hexdigest() for rel, data in before.items()
    }
    assert recovery.flr_path == "partition#2 NTFS/inetpub"


def test_a_folder_of_100_files_with_one_over_the_byte_limit_is_refused_saying_so(
    inline_tasks, sim, sites, people, agent, tagged, settings, tmp_path
) -> None:
    settings.REWIND_FOLDER_MAX_BYTES = 50_000
    # A folder of its own: a recovery of another test may have had the same id (ids come back after a rollback).
    settings.REWIND_STORAGE_DIR = tmp_path / "recovered"
    for n in range(99):
        sim.set_file("db01", f"/srv/data/f{n:03}.txt", text=f"file {n}\n")
    sim.set_file("db01", "/srv/data/huge.bin", size=80_000, seed=7)
    tagged("db01")

    recovery = _run(inline_tasks, people, agent, "db01", "/srv/data")

    assert recovery.status == RecoveryRequest.Status.FAILED
    assert "/srv/data holds more than 50000 bytes (REWIND_FOLDER_MAX_BYTES)" in recovery.error
    assert "huge.bin alone is 80000 bytes" in recovery.error
    assert recovery.unmount_ok is True
    assert _live(sim, "site-b") == []
    assert sim.calls("site-b").get(DOWNLOAD, 0) == 0  # refused from the listing, before any download
    assert recovery.manifest == []
    assert not list((Path(settings.REWIND_STORAGE_DIR) / str(recovery.pk)).glob("*.zip*"))


def test_a_folder_above_the_file_count_limit_is_refused_with_the_figures(
    inline_tasks, sim, sites, people, agent, tagged, settings
) -> None:
    settings.REWIND_FOLDER_MAX_FILES = 5
    for n in range(8):
        sim.set_file("db01", f"/srv/many/f{n}.txt", text=f"{n}\n")
    tagged("db01")

    recovery = _run(inline_tasks, people, agent, "db01", "/srv/many")

    assert recovery.status == RecoveryRequest.Status.FAILED
    assert "/srv/many holds more than 5 files (REWIND_FOLDER_MAX_FILES): 6 were listed" in recovery.error
    assert _live(sim, "site-b") == []
    assert sim.calls("site-b").get(DOWNLOAD, 0) == 0


def test_a_folder_with_more_subfolders_than_the_limit_stops_browsing(
    inline_tasks, sim, sites, people, agent, tagged, settings
) -> None:
    settings.REWIND_FOLDER_MAX_FOLDERS = 3
    for n in range(6):
        sim.set_file("db01", f"/srv/tree/d{n}/f.txt", text=f"{n}\n")
    tagged("db01")
    browsed_before = sim.calls("site-b").get("POST /v1/flrs/{session_id}/browse", 0)

    recovery = _run(inline_tasks, people, agent, "db01", "/srv/tree")

    assert recovery.status == RecoveryRequest.Status.FAILED
    assert "/srv/tree holds more than 3 folders (REWIND_FOLDER_MAX_FOLDERS" in recovery.error
    # The mapping's browses (partitions, /, /srv) and at most 3 of the walk's: never one per subfolder.
    browsed = sim.calls("site-b")["POST /v1/flrs/{session_id}/browse"] - browsed_before
    assert browsed <= 3 + 3
    assert _live(sim, "site-b") == []


def test_an_empty_folder_gets_a_clear_answer(inline_tasks, sim, sites, people, agent, tagged) -> None:
    tagged("app01")

    recovery = _run(inline_tasks, people, agent, "app01", "/tmp")

    assert recovery.status == RecoveryRequest.Status.FAILED
    assert "/tmp is an empty folder in this checkpoint" in recovery.error
    assert "there is no file to bring back" in recovery.error
    assert recovery.unmount_ok is True


def test_a_folder_without_recursive_says_how_to_ask_for_it(inline_tasks, sim, sites, people, agent, tagged) -> None:
    tagged("web01")
    recovery = recovery_request_create(agent=agent, vm="web01", path="/etc/nginx", reason="x")
    recovery_request_approve(recovery_id=recovery.pk, user=people.approver)
    recovery = wait_recovery_finished(recovery, tasks=inline_tasks)
    assert recovery.status == RecoveryRequest.Status.FAILED
    assert "not a file" in recovery.error
    assert "recursive=true" in recovery.error


@pytest.mark.django_db
def test_a_folder_to_restore_in_place_without_a_writer_is_refused_and_records_nothing(sites, agent) -> None:
    with pytest.raises(ApplicationError, match="no tool is configured to write a file into web01"):
        recovery_request_create(agent=agent, vm="web01", path="/etc/nginx", reason="x", recursive=True, restore=True)
    assert not RecoveryRequest.objects.exists()


def test_the_folder_archive_downloads_only_with_the_agents_token_or_a_reviewer(
    inline_tasks, sim, sites, people, agent, tagged
) -> None:
    before = _nginx_folder(sim)
    tagged("web01")
    recovery = _run(inline_tasks, people, agent, "web01", "/etc/nginx")
    assert recovery.status == RecoveryRequest.Status.SUCCEEDED, recovery.error
    mine = agent_token_issue(actor=Actor.system("tests"), agent=agent).token
    other = Agent.objects.create(name="other", owner=people.second)
    theirs = agent_token_issue(actor=Actor.system("tests"), agent=other).token
    url = reverse("recoveries-api:download", args=[recovery.pk])
    client = Client()

    ok = client.get(url, HTTP_AUTHORIZATION=f"Bearer {mine}")
    assert ok.status_code == 200
    assert ok["Content-Type"] == "application/zip"
    body = ok.getvalue()
    assert ok["X-Content-SHA256"] == hashlib.sha256(body).hexdigest() == recovery.sha256
    with zipfile.ZipFile(io.BytesIO(body)) as zipped:
        assert {name: zipped.read(name) for name in zipped.namelist()} == before
    assert client.get(url, HTTP_AUTHORIZATION=f"Bearer {theirs}").status_code == 404
    assert client.get(url).status_code in (401, 403)
    client.force_login(people.approver)
    assert client.get(url).status_code == 200
    detail = client.get(reverse("recoveries-api:detail", args=[recovery.pk])).json()
    assert detail["recursive"] is True
    assert detail["result"]["folder"]["files"] == len(before)
    assert detail["result"]["url"].endswith(url)
    page = client.get(reverse("admin:recoveries_recoveryrequest_review", args=[recovery.pk])).content.decode()
    assert f"a folder: {len(before)} files, {sum(len(b) for b in before.values())} bytes" in page
    assert "sites-available/deep/more/site.conf" in page


def test_an_agent_asks_for_a_folder_over_mcp_and_downloads_its_zip(
    worker, mcp_server, mcp_client, sim, sites, people, tagged
) -> None:
    agent, token = make_agent_token()
    before = _nginx_folder(sim)
    tagged("web01", "chg-folder", agent_name=agent.name)
    sim.set_file("web01", "/etc/nginx/nginx.conf", text="broken\n")

    asked = tool_ok(
        run(
            call_tool_async(
                mcp_client,
                token,
                "zerto_recover_file",
                {
                    "vm": "web01",
                    "path": "/etc/nginx",
                    "reason": "nginx broke",
                    "change_id": "chg-folder",
                    "recursive": True,
                },
            )
        )
    )
    assert asked["status"] == "pending"
    assert asked["recursive"] is True
    recovery_request_approve(recovery_id=asked["id"], user=people.approver)
    done = poll_recovery_status(mcp_client, token, asked["id"])

    assert done["status"] == "succeeded", done
    result = done["result"]
    assert result["content"] is None  # a folder is never inline
    folder = result["folder"]
    assert folder["files"] == len(before)
    assert {e["path"]: e["sha256"] for e in folder["manifest"]} == {
        rel: hashlib.sha256(data).hexdigest() for rel, data in before.items()
    }
    url = mcp_server.url + urlsplit(result["url"]).path
    got = requests.get(url, headers={"Authorization": f"Bearer {token}"}, timeout=60)
    assert got.status_code == 200
    assert hashlib.sha256(got.content).hexdigest() == result["sha256"]
    with zipfile.ZipFile(io.BytesIO(got.content)) as zipped:
        assert {name: zipped.read(name) for name in zipped.namelist()} == before
    _, other = make_agent_token()
    assert requests.get(url, headers={"Authorization": f"Bearer {other}"}, timeout=60).status_code == 404
    assert requests.get(url, timeout=60).status_code in (401, 403)


def test_the_approver_reads_that_it_is_a_folder_before_and_its_figures_after(
    inline_tasks, sim, sites, people, agent, tagged, settings
) -> None:
    settings.REWIND_FOLDER_MAX_FILES = 40
    settings.REWIND_FOLDER_MAX_BYTES = 9000
    tagged("web01")
    pending = recovery_request_create(agent=agent, vm="web01", path="/var/www/html", reason="x", recursive=True)
    subject, lines = approval_summary(pending)
    assert subject.endswith("/var/www/html (a folder)")
    assert "asks for a folder back" in lines[0]
    assert "Folder:      a folder, with every file under it (up to 40 files and 9000 bytes" in "\n".join(lines)
    client = Client()
    client.force_login(people.approver)
    review = reverse("admin:recoveries_recoveryrequest_review", args=[pending.pk])
    assert "up to 40 files and 9000 bytes" in client.get(review).content.decode()

    recovery_request_approve(recovery_id=pending.pk, user=people.approver)
    done = wait_recovery_finished(pending, tasks=inline_tasks)
    assert done.status == RecoveryRequest.Status.SUCCEEDED, done.error
    total = sum(e["size"] for e in done.manifest)
    assert f"a folder: {len(done.manifest)} files, {total} bytes" in client.get(review).content.decode()


@pytest.mark.process  # it mounts a small tmpfs
def test_a_full_recovered_files_folder_fails_the_folder_clearly_and_keeps_nothing(
    inline_tasks, sim, sites, people, agent, tagged, settings, tmp_path
) -> None:
    storage = tmp_path / "small"
    storage.mkdir()
    try:
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=64k,mode=0755", "tmpfs", str(storage)],
            check=True,
            capture_output=True,
            timeout=30,
        )
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"mounting a small tmpfs needs CAP_SYS_ADMIN (root in CI): {exc.stderr.decode().strip()}")
    try:
        settings.REWIND_STORAGE_DIR = storage
        for n in range(3):
            sim.set_file("db01", f"/srv/logs/part{n}.log", size=100_000, seed=n)
        tagged("db01")

        recovery = _run(inline_tasks, people, agent, "db01", "/srv/logs")

        assert recovery.status == RecoveryRequest.Status.FAILED
        assert "No space left on device" in recovery.error
        assert "the mount was ended and nothing was kept" in recovery.error
        assert recovery.unmount_ok is True
        assert _live(sim, "site-b") == []
        assert [p.name for p in storage.rglob("*") if p.is_file()] == []
    finally:
        subprocess.run(["umount", "-l", str(storage)], check=False, timeout=30)
