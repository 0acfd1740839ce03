"""File level recovery through the client against the simulator: mount, browse, download
(raw or zip, relative or absolute link), both session shapes, unmount and its failures."""

from __future__ import annotations

import hashlib
import io
import tracemalloc
from collections.abc import Buffer
from datetime import UTC, datetime, timedelta

import pytest

from rewind.zvm import (
    FlrSession,
    ZvmClient,
    ZvmNotFoundError,
    ZvmRejectedError,
    ZvmTransientError,
    ZvmUnparseableResponse,
)
from tests.fixtures import wait_until
from tests.helpers import calls
from tests.simfixtures import SimHandle
from tests.zvm.support import MakeClient

NGINX = "partition#2 Ext4/etc/nginx/nginx.conf"


class Flr:
    """web01 in vpg-web: protected at site-a, recovered (and mounted) at site-b."""

    def __init__(self, sim: SimHandle, make_client: MakeClient) -> None:
        self.sim = sim
        self.protected = make_client("site-a")
        self.client: ZvmClient = make_client("site-b")
        vm = sim.vm("web01")
        self.vm_id: str = vm["identifier"]
        self.vpg_id: str = next(v["identifier"] for v in vm["vpgs"] if v["name"] == "vpg-web")

    def latest_checkpoint(self) -> str:
        latest = self.client.checkpoint_stats(self.vpg_id).latest
        assert latest
        assert latest.identifier
        return latest.identifier

    def tagged_checkpoint(self, tag: str) -> str:
        since = datetime.now(UTC) - timedelta(minutes=1)
        self.protected.insert_tagged_checkpoint(self.vpg_id, tag)
        found = wait_until(
            lambda: [c for c in self.client.list_checkpoints(self.vpg_id, start=since) if c.tag == tag],
            20.0,
            what="the tagged checkpoint",
        )
        assert found[0].identifier
        return found[0].identifier

    def mount(self, checkpoint: str | None = None) -> str:
        return self.client.flr_mount(
            vpg_id=self.vpg_id, vm_id=self.vm_id, checkpoint_id=checkpoint or self.latest_checkpoint()
        )

    def settled(self, session_id: str) -> FlrSession:
        def check() -> FlrSession | None:
            session = self.client.get_flr_session(session_id)
            return session if session.is_mounted or session.is_terminal else None

        return wait_until(check, 20.0, what="the mount")

    def mounted(self, checkpoint: str | None = None) -> str:
        session_id = self.mount(checkpoint)
        assert self.settled(session_id).is_mounted
        return session_id


@pytest.fixture
def flr(sim: SimHandle, make_client: MakeClient) -> Flr:
    return Flr(sim, make_client)


def test_it_mounts_and_reads_the_session(sim: SimHandle, flr: Flr) -> None:
    checkpoint = flr.latest_checkpoint()
    session_id = flr.mount(checkpoint)
    session = flr.settled(session_id)
    assert session.is_mounted
    assert not session.is_terminal
    assert (session.identifier, session.vm_identifier, session.vpg_identifier, session.checkpoint_identifier) == (
        session_id,
        flr.vm_id,
        flr.vpg_id,
        checkpoint,
    )
    b_id = next(s["identifier"] for s in sim.state()["sites"] if s["slug"] == "site-b")
    assert session.site_identifier == b_id
    assert session.mount_time
    assert session.mount_time.tzinfo
    assert [s.identifier for s in flr.client.list_flr_sessions(vm_id=flr.vm_id)] == [session_id]


@pytest.mark.parametrize("shape", ["object", "array"])
def test_it_reads_a_session_in_either_shape(sim: SimHandle, flr: Flr, shape: str) -> None:
    session_id = flr.mounted()
    sim.set_variants("site-b", flr_get_shape=shape)
    session = flr.client.get_flr_session(session_id)
    assert session.identifier == session_id
    assert session.is_mounted


def test_an_unknown_session_is_not_found(flr: Flr) -> None:
    with pytest.raises(ZvmNotFoundError):
        flr.client.get_flr_session("00000000-0000-0000-0000-000000000000.00000000-0000-0000-0000-000000000000")


def test_it_browses_partitions_folders_and_files(flr: Flr) -> None:
    session_id = flr.mounted()
    root = flr.client.flr_browse(session_id)
    assert root.main is not None
    assert root.main.path == ""
    assert [(i.path, i.type) for i in root.items] == [
        ("partition#1 Ext4", "Partition"),
        ("partition#2 Ext4", "Partition"),
    ]
    nginx = flr.client.flr_browse(session_id, "partition#2 Ext4/etc/nginx")
    (item,) = nginx.items
    assert (item.path, item.name, item.type, item.is_downloadable) == (NGINX, "nginx.conf", "File", True)
    assert item.size_in_bytes
    assert item.last_write_time
    assert item.last_write_time.tzinfo
    with pytest.raises(ZvmNotFoundError):
        flr.client.flr_browse(session_id, "partition#2 Ext4/nope")


@pytest.mark.parametrize(
    ("fmt", "form"), [("raw", "relative"), ("zip", "relative"), ("raw", "absolute"), ("zip", "absolute")]
)
def test_it_downloads_a_file_raw_or_zipped_by_any_link(sim: SimHandle, flr: Flr, fmt: str, form: str) -> None:
    expected = sim.read_file("web01", "/etc/nginx/nginx.conf")
    session_id = flr.mounted()
    sim.set_variants("site-b", download_format=fmt, download_url=form)
    sink = io.BytesIO()
    result = flr.client.flr_download(session_id, NGINX, sink)
    assert sink.getvalue() == expected
    assert (result.size, result.sha256, result.zipped) == (
        len(expected),
        hashlib.sha256(expected).hexdigest(),
        fmt == "zip",
    )
    assert calls(sim, "site-b", "GET /v1/downloads/{download_id}") == 1


def test_the_download_link_is_absolute_under_the_site_prefix(sim: SimHandle, flr: Flr) -> None:
    session_id = flr.mounted()
    for form in ("relative", "absolute"):
        sim.set_variants("site-b", download_url=form)
        url = flr.client.flr_download_url(session_id, [NGINX])
        assert url.startswith(sim.site_url("site-b") + "/v1/downloads/")


def test_it_waits_briefly_for_a_download_that_is_not_ready(sim: SimHandle, flr: Flr) -> None:
    session_id = flr.mounted()
    flr.client.download_ready_delay = 0.01
    sim.add_fault("http_error", site="site-b", status=409, path_regex="/v1/downloads/", count=2)
    sink = io.BytesIO()
    flr.client.flr_download(session_id, NGINX, sink)
    assert sink.getvalue() == sim.read_file("web01", "/etc/nginx/nginx.conf")
    assert calls(sim, "site-b", "GET /v1/downloads/{download_id}") == 3


@pytest.mark.parametrize("pending", [404, 409])
def test_it_waits_for_a_download_the_zvm_prepares_for_a_while(sim: SimHandle, flr: Flr, pending: int) -> None:
    # Six quick retries (about 5 s here) were once the whole budget; a ZVM preparing a large
    # zip may take longer, and answers 404 or 409 meanwhile (both undocumented).
    session_id = flr.mounted()
    # Waits from 0.05 s doubling to 2 s: about nine asks in the 7 s, seven or more even when each
    # answer takes half a second on a loaded host, so "more than six" never hangs on the machine's speed.
    flr.client.download_ready_delay = 0.05
    sim.set_variants("site-b", download_ready_after_s=7.0, download_pending_status=pending)
    sink = io.BytesIO()
    flr.client.flr_download(session_id, NGINX, sink)
    assert sink.getvalue() == sim.read_file("web01", "/etc/nginx/nginx.conf")
    assert calls(sim, "site-b", "GET /v1/downloads/{download_id}") > 6


def test_a_download_that_never_becomes_ready_fails_after_the_budget(sim: SimHandle, flr: Flr) -> None:
    session_id = flr.mounted()
    flr.client.download_ready_delay = 0.05
    flr.client.download_ready_timeout_s = 1.0
    sim.set_variants("site-b", download_ready_after_s=120.0, download_pending_status=409)
    with pytest.raises(ZvmRejectedError, match="409"):
        flr.client.flr_download(session_id, NGINX, io.BytesIO())


@pytest.mark.parametrize("fmt", ["raw", "zip"])
def test_a_large_file_streams_in_bounded_memory(sim: SimHandle, flr: Flr, fmt: str) -> None:
    size = 8 * 1024 * 1024
    sim.set_file("web01", "/var/www/html/big.bin", size=size, seed=7)
    expected = hashlib.sha256(sim.read_file("web01", "/var/www/html/big.bin")).hexdigest()
    session_id = flr.mounted(flr.tagged_checkpoint(f"big-{fmt}"))
    sim.set_variants("site-b", download_format=fmt)
    digest = hashlib.sha256()

    class HashingSink(io.BytesIO):
        """Hashes what it is given and keeps none of it: the test measures memory."""

        def write(self, data: Buffer, /) -> int:
            digest.update(data)
            return memoryview(data).nbytes

    tracemalloc.start()
    try:
        result = flr.client.flr_download(
            session_id, "partition#2 Ext4/var/www/html/big.bin", HashingSink(), chunk_size=64 * 1024
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (result.size, result.sha256, digest.hexdigest(), result.zipped) == (size, expected, expected, fmt == "zip")
    assert peak < size // 4, f"peak {peak} bytes: the file was held in memory"


def test_an_unparseable_mount_answer_is_typed_and_the_session_still_exists(sim: SimHandle, flr: Flr) -> None:
    sim.add_fault("mount_unparseable", site="site-b")
    with pytest.raises(ZvmUnparseableResponse, match="the mount may have started anyway"):
        flr.mount()
    assert len(flr.client.list_flr_sessions(vm_id=flr.vm_id)) == 1


def test_a_failed_mount_is_terminal(sim: SimHandle, flr: Flr) -> None:
    sim.add_fault("mount_fail", site="site-b")
    session = flr.settled(flr.mount())
    assert session.status == "MountFailed"
    assert session.is_terminal
    assert not session.is_mounted


def test_it_unmounts_and_the_session_goes(flr: Flr) -> None:
    session_id = flr.mounted()
    assert flr.client.flr_unmount(session_id)

    def gone() -> bool:
        try:
            session = flr.client.get_flr_session(session_id)
        except ZvmNotFoundError:
            return True
        assert session.is_terminal, session.status  # unmounting: no longer a live mount
        return False

    wait_until(gone, 20.0, what="the session to go")
    assert flr.client.list_flr_sessions(vm_id=flr.vm_id) == []


def test_a_failed_unmount_is_not_retried(sim: SimHandle, flr: Flr) -> None:
    session_id = flr.mounted()
    sim.add_fault("unmount_fail", site="site-b")
    with pytest.raises(ZvmTransientError, match="HTTP 500"):
        flr.client.flr_unmount(session_id)
    assert calls(sim, "site-b", "DELETE /v1/flrs/{session_id}") == 1
    assert flr.client.get_flr_session(session_id).is_mounted


def test_it_lists_sessions_of_other_operators(sim: SimHandle, flr: Flr) -> None:
    foreign = sim.open_foreign_session("site-b", "web01", "vpg-web")
    ours = flr.mount()
    assert {s.identifier for s in flr.client.list_flr_sessions()} == {foreign, ours}
