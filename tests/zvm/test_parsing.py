"""Parsing of ZVM JSON into the client's types: any case, missing and unknown fields, dates."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from rewind.zvm import (
    BrowseResult,
    Checkpoint,
    CheckpointStats,
    FlrSession,
    LocalSite,
    PeerSite,
    PointInTime,
    Task,
    VmList,
    VmRow,
    Vpg,
)
from rewind.zvm._fields import Fields, format_datetime, parse_datetime

T = datetime(2025, 3, 1, 10, 15, 42, tzinfo=UTC)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("2025-03-01T10:15:42.000Z", T),
        ("2025-03-01T10:15:42Z", T),
        ("2025-03-01T10:15:42", T),
        ("2025-03-01T10:15:42.1234567Z", T.replace(microsecond=123456)),
        ("2025-03-01T11:15:42+01:00", T),
        ("/Date(1740824142000)/", T),
        ("/Date(1740824142000+0100)/", T),
        ("not a date", None),
        ("", None),
        (None, None),
        (17, None),
    ],
)
def test_it_parses_every_date_form_into_aware_utc(raw: object, expected: datetime | None) -> None:
    parsed = parse_datetime(raw)
    assert parsed == expected
    if parsed is not None:
        assert parsed.tzinfo is not None


def test_it_formats_filter_dates_as_utc_with_milliseconds() -> None:
    local = datetime(2025, 3, 1, 12, 15, 42, 987654, tzinfo=timezone(timedelta(hours=2)))
    assert format_datetime(local) == "2025-03-01T10:15:42.987Z"
    assert format_datetime(datetime(2025, 3, 1, 10, 15, 42)) == "2025-03-01T10:15:42.000Z"


def test_a_field_is_found_in_any_case_and_a_null_counts_as_missing() -> None:
    f = Fields({"VmName": None, "vmname": "web01", "vpgName": "vpg-web", "Status": 0, "SourceSite": "Site A"})
    assert f.get("VmName") == "web01", "a null under the name as asked does not hide the value in another case"
    assert f.get("VpgName") == "vpg-web"  # camelCase answered for a PascalCase name
    assert f.get("Status") == 0, "a falsy value is a value"
    assert f.get("ProtectedSiteName", "SourceSite") == "Site A", "the next name when the first is missing"
    assert f.get("Missing") is None
    assert not Fields(["not", "an", "object"])
    assert Fields(None).get("VmName") is None


ROW_IN_ANY_CASE = {
    "vmidentifier": "srv.vm-38",
    "VMNAME": "web01",
    "VpgIdentifier": "vpg-1",
    "vpgName": "vpg-web",
    "ProtectedSite": {"identifier": "s-a", "type": "LocalSiteApi", "href": "h", "rel": None},
    "recoverysite": {"Identifier": "s-b", "Type": "PeerSiteApi"},
    "ProtectedSiteName": "Site A",
    "RecoverySiteName": "Site B",
    "Status": 1,
    "SubStatus": "0",
    "EnabledActions": {"isFlrEnabled": True},
    "VmNetworkInformation": {
        "NetworkAdapters": [{"IpAddresses": ["10.0.0.11", "fe80::1"]}, {"ipaddresses": ["10.0.0.11"]}]
    },
    "SomethingNew": {"x": 1},
}
ROW_OF_LINKS_AND_LEGACY_NAMES = {
    "Link": {"identifier": "srv.vm-38?VpgIdentifier=vpg-9"},
    "SourceSite": "Old A",
    "TargetSite": "Old B",
}


def test_it_reads_a_vm_row_in_any_case_and_ignores_unknown_fields() -> None:
    row = VmRow.from_json(ROW_IN_ANY_CASE)
    assert (row.vm_identifier, row.vm_name) == ("srv.vm-38", "web01")
    assert (row.vpg_identifier, row.vpg_name) == ("vpg-1", "vpg-web")
    assert row.protected_site.is_local
    assert row.protected_site.identifier == "s-a"
    assert not row.recovery_site.is_local
    assert row.recovery_site.identifier == "s-b"
    assert (row.protected_site_name, row.recovery_site_name) == ("Site A", "Site B")
    assert (row.status, row.sub_status, row.is_flr_enabled) == (1, 0, True)
    assert row.ip_addresses == ("10.0.0.11", "fe80::1")


def test_it_falls_back_to_the_link_and_legacy_names_for_a_vm_row() -> None:
    row = VmRow.from_json(ROW_OF_LINKS_AND_LEGACY_NAMES)
    assert (row.vm_identifier, row.vpg_identifier) == ("srv.vm-38", "vpg-9")
    assert (row.protected_site_name, row.recovery_site_name) == ("Old A", "Old B")
    assert row.protected_site.identifier is None
    assert not row.protected_site.is_local
    assert row.is_flr_enabled is None
    assert row.ip_addresses == ()


def test_a_whole_vm_list_reads_each_row_as_a_vm_row_does_and_parses_only_the_rows_read() -> None:
    raw = [ROW_IN_ANY_CASE, ROW_OF_LINKS_AND_LEGACY_NAMES, {"VmName": None, "Link": "not an object"}, "not a row", {}]
    listed = VmList(raw)
    assert len(listed) == len(raw)
    assert [listed.name_at(i) for i in range(len(raw))] == ["web01", None, None, None, None]
    assert [listed.identifier_at(i) for i in range(len(raw))] == ["srv.vm-38", "srv.vm-38", None, None, None]
    assert listed.ip_addresses_at(0) == ("10.0.0.11", "fe80::1")
    assert listed._rows == [None] * len(raw)  # reading the keys parsed no row
    assert listed[1] == VmRow.from_json(ROW_OF_LINKS_AND_LEGACY_NAMES)
    assert listed._rows.count(None) == len(raw) - 1
    assert listed[1] is listed[1]
    assert list(listed) == [VmRow.from_json(row) for row in raw]


def test_a_whole_vm_list_indexes_its_rows_once_per_key() -> None:
    def by_identifier(rows: VmList, i: int) -> list[str]:
        identifier = rows.identifier_at(i)
        return [identifier] if identifier else []

    listed = VmList([ROW_IN_ANY_CASE, ROW_OF_LINKS_AND_LEGACY_NAMES, {}])
    index = listed.index(by_identifier)
    assert index == {"srv.vm-38": (0, 1)}
    assert listed.index(by_identifier) is index


def test_it_reads_a_vpg_with_a_failover_test_running() -> None:
    vpg = Vpg.from_json(
        {
            "VpgIdentifier": "g",
            "VpgName": "vpg-web",
            "Status": 0,
            "SubStatus": 1,
            "ProgressPercentage": 42.4,
            "ActiveProcessesApi": {"RunningFailOverTestApi": {"Stage": "Testing"}},
            "ProtectedSite": {"identifier": "a", "type": "LocalSiteApi"},
        }
    )
    assert (vpg.identifier, vpg.name, vpg.status, vpg.sub_status) == ("g", "vpg-web", 0, 1)
    assert vpg.failover_test_running
    assert vpg.progress_percentage == 42
    assert vpg.protected_site.is_local
    assert vpg.recovery_site.identifier is None
    idle = Vpg.from_json({"ActiveProcessesApi": {"RunningFailOverTestApi": None}})
    assert not idle.failover_test_running
    assert idle.identifier is None


def test_it_reads_checkpoints_and_their_stats() -> None:
    cp = Checkpoint.from_json(
        {"CheckpointIdentifier": 166835, "TimeStamp": "/Date(1740824142000)/", "Tag": "ai:x", "Type": 1}
    )
    assert (cp.identifier, cp.timestamp, cp.tag, cp.type) == ("166835", T, "ai:x", 1)
    stats = CheckpointStats.from_json(
        {"Earliest": {"checkpointIdentifier": "1", "timeStamp": "2025-03-01T10:15:42Z"}, "Latest": None}
    )
    assert stats.earliest is not None
    assert stats.earliest.timestamp == T
    assert stats.latest is None


def test_it_reads_points_in_time_with_mount_eligibility() -> None:
    pit = PointInTime.from_json(
        {"Checkpoint": {"CheckpointIdentifier": "7"}, "CanMount": {"IsAllowed": False, "Reason": "Clone running"}}
    )
    assert pit.checkpoint is not None
    assert pit.checkpoint.identifier == "7"
    assert pit.can_mount is False
    assert pit.can_mount_reason == "Clone running"
    assert PointInTime.from_json({}).can_mount is None


@pytest.mark.parametrize(
    ("state", "completed", "failed"),
    [(1, False, False), (6, True, False), (4, False, True), (5, False, True), (7, False, True), (None, False, False)],
)
def test_it_reads_task_states(state: int | None, completed: bool, failed: bool) -> None:
    task = Task.from_json(
        {
            "TaskIdentifier": "t.s",
            "Type": "InsertTaggedCP",
            "CompleteReason": "",
            "Status": {"State": state, "Progress": 100},
            "Started": "2025-03-01T10:15:42.000Z",
        }
    )
    assert (task.identifier, task.type, task.state) == ("t.s", "InsertTaggedCP", state)
    assert (task.completed, task.failed) == (completed, failed)
    assert task.started == T
    assert task.completed_at is None


@pytest.mark.parametrize(
    ("status", "mounted", "terminal"),
    [
        ("MountInProgress", False, False),
        ("MountCompletedSuccessfully", True, False),
        ("MountFailed", False, True),
        ("UnmountInProgress", False, True),
        ("SomethingNew", False, False),
        (None, False, False),
    ],
)
def test_it_reads_flr_sessions(status: str | None, mounted: bool, terminal: bool) -> None:
    session = FlrSession.from_json(
        {
            "FlrSessionIdentifier": "f.s",
            "FlrSessionStatus": status,
            "VmIdentifier": "srv.vm-1",
            "VpgIdentifier": "g",
            "CheckpointIdentifier": "6",
            "MountTime": "2018-03-04T12:24:41.551Z",
            "SiteIdentifier": "s",
            "FlrSessionType": "jflr",
            "NumberOfRelatedRunningTasks": 0,
        }
    )
    assert (session.identifier, session.vm_identifier, session.checkpoint_identifier) == ("f.s", "srv.vm-1", "6")
    assert session.mount_time == datetime(2018, 3, 4, 12, 24, 41, 551000, tzinfo=UTC)
    assert (session.is_mounted, session.is_terminal) == (mounted, terminal)


def test_it_reads_a_browse_listing() -> None:
    result = BrowseResult.from_json(
        {
            "MainPathItem": {
                "Path": "",
                "Type": "Partition",
                "IsBrowsable": True,
                "SizeInBytes": None,
                "DownloadInformation": {"IsDownloadable": True},
            },
            "PathItems": [
                {
                    "Path": "partition#1 Ext4/etc/hostname",
                    "Type": "File",
                    "SizeInBytes": 6,
                    "DownloadInformation": {"IsDownloadable": True, "AdditionalInformation": None},
                    "LastWriteTime": "2025-03-01T10:15:42Z",
                },
                {
                    "path": "partition#1 Ext4/link",
                    "type": "File",
                    "downloadInformation": {
                        "isDownloadable": False,
                        "additionalInformation": "Links are not supported.",
                    },
                },
            ],
        }
    )
    assert result.main is not None
    assert result.main.type == "Partition"
    assert result.main.is_browsable
    first, link = result.items
    assert (first.name, first.size_in_bytes, first.is_downloadable, first.last_write_time) == ("hostname", 6, True, T)
    assert not link.is_downloadable
    assert link.not_downloadable_reason == "Links are not supported."
    assert BrowseResult.from_json({}) == BrowseResult(main=None, items=[])


def test_it_reads_sites() -> None:
    local = LocalSite.from_json({"SiteIdentifier": "a", "SiteName": "Site A", "SiteType": "VCenter", "Version": "10.0"})
    assert (local.identifier, local.name, local.type, local.version) == ("a", "Site A", "VCenter", "10.0")
    peer = PeerSite.from_json(
        {
            "Link": {"identifier": "b"},
            "PeerSiteName": "Site B",
            "HostName": "zvm-b",
            "Port": 9071,
            "PairingStatus": 0,
            "SiteType": "VCenter",
            "Version": "10.0",
        }
    )
    assert (peer.identifier, peer.name, peer.host_name) == ("b", "Site B", "zvm-b")
    assert (peer.port, peer.pairing_status) == (9071, 0)
    assert LocalSite.from_json("garbage") == LocalSite(None, None, None, None)
