"""Result types of the ZVM client: small frozen dataclasses, parsed tolerantly.

Each ``from_json`` reads the ZVM's JSON without regard to case, maps missing or mistyped fields to None (or a
neutral default) and ignores fields it does not know. Callers never see raw dicts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ._fields import Fields

# Task Status.State values (Swagger enum 0..7; names from the official Python SDK).
TASK_IN_PROGRESS = 1
TASK_COMPLETED = 6

FLR_MOUNTED = "MountCompletedSuccessfully"
# Older ZVMs (and their web UI) said MountReady for the same state.
_FLR_MOUNTED = {"mountcompletedsuccessfully", "mountready"}
_FLR_GONE = {"notmounted", "unmounted", "deleted", "removed"}


def _link_identifier(f: Fields) -> str | None:
    return f.child("Link").text("identifier")


@dataclass(frozen=True)
class SiteLink:
    """A ``ProtectedSite``/``RecoverySite`` ResourceLink. ``is_local``: it is the ZVM called."""

    identifier: str | None = None
    type: str | None = None
    href: str | None = None

    @property
    def is_local(self) -> bool:
        return (self.type or "").lower() == "localsiteapi"

    @classmethod
    def from_json(cls, raw: object) -> SiteLink:
        f = Fields(raw)
        return cls(identifier=f.text("identifier"), type=f.text("type"), href=f.text("href"))


@dataclass(frozen=True)
class LocalSite:
    identifier: str | None
    name: str | None
    type: str | None
    version: str | None

    @classmethod
    def from_json(cls, raw: object) -> LocalSite:
        f = Fields(raw)
        return cls(
            identifier=f.text("SiteIdentifier") or _link_identifier(f),
            name=f.text("SiteName"),
            type=f.text("SiteType"),
            version=f.text("Version", "DisplayVersion"),
        )


@dataclass(frozen=True)
class PeerSite:
    identifier: str | None
    name: str | None
    type: str | None
    version: str | None
    host_name: str | None
    port: int | None = None
    pairing_status: int | None = None

    @classmethod
    def from_json(cls, raw: object) -> PeerSite:
        f = Fields(raw)
        return cls(
            identifier=f.text("SiteIdentifier") or _link_identifier(f),
            name=f.text("PeerSiteName", "SiteName"),
            type=f.text("SiteType"),
            version=f.text("Version"),
            host_name=f.text("HostName"),
            port=f.integer("Port"),
            pairing_status=f.integer("PairingStatus"),
        )


def _ip_addresses(f: Fields) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for adapter in f.child("VmNetworkInformation").items("NetworkAdapters"):
        for ip in Fields(adapter).items("IpAddresses"):
            if isinstance(ip, str) and ip:
                seen.setdefault(ip, None)
    return tuple(seen)


def _split_vm_link(link_id: str | None) -> tuple[str | None, str | None]:
    # A VM row's Link.identifier looks like "<vmId>?VpgIdentifier=<vpgId>".
    if not link_id:
        return None, None
    vm_id, _, query = link_id.partition("?")
    vpg_id = None
    for pair in query.split("&"):
        key, _, value = pair.partition("=")
        if key.lower() == "vpgidentifier" and value:
            vpg_id = value
    return vm_id or None, vpg_id


@dataclass(frozen=True)
class VmRow:
    """One row of ``GET /v1/vms``: one (VM, VPG) pair."""

    vm_identifier: str | None
    vm_name: str | None
    vpg_identifier: str | None
    vpg_name: str | None
    protected_site: SiteLink
    recovery_site: SiteLink
    protected_site_name: str | None
    recovery_site_name: str | None
    status: int | None
    sub_status: int | None
    is_flr_enabled: bool | None
    ip_addresses: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, raw: object) -> VmRow:
        f = Fields(raw)
        link = f.child("Link")
        link_vm, link_vpg = _split_vm_link(link.text("identifier"))
        return cls(
            vm_identifier=f.text("VmIdentifier") or link_vm,
            vm_name=_vm_name(f),
            vpg_identifier=f.text("VpgIdentifier") or link.text("vpg_identifier") or link_vpg,
            vpg_name=f.text("VpgName"),
            protected_site=SiteLink.from_json(f.get("ProtectedSite")),
            recovery_site=SiteLink.from_json(f.get("RecoverySite")),
            # 7.x called the names SourceSite/TargetSite.
            protected_site_name=f.text("ProtectedSiteName", "SourceSite"),
            recovery_site_name=f.text("RecoverySiteName", "TargetSite"),
            status=f.integer("Status"),
            sub_status=f.integer("SubStatus"),
            is_flr_enabled=f.child("EnabledActions").flag("IsFlrEnabled"),
            ip_addresses=_ip_addresses(f),
        )


def _vm_name(f: Fields) -> str | None:
    return f.text("VmName")


def _vm_identifier(f: Fields) -> str | None:
    return f.text("VmIdentifier") or _split_vm_link(f.child("Link").text("identifier"))[0]


# The keys of a VM row that ``VmRow.from_json`` reads, as ZVM 10.x writes them; the legacy names
# it reads only when these are missing. A whole list keeps only these of each row.
_VM_ROW_NAMES = (
    "VmIdentifier",
    "VmName",
    "VpgIdentifier",
    "VpgName",
    "ProtectedSite",
    "RecoverySite",
    "ProtectedSiteName",
    "RecoverySiteName",
    "Status",
    "SubStatus",
    "EnabledActions",
    "VmNetworkInformation",
    "Link",
)
_VM_ROW_FOLDED = frozenset(key.lower() for key in (*_VM_ROW_NAMES, "SourceSite", "TargetSite"))


def _kept(raw: object) -> dict[str, Any]:
    """The keys of ``raw`` that ``VmRow.from_json`` reads, whatever their case (the same row to it)."""
    if not isinstance(raw, dict):
        return {}
    kept = {name: raw[name] for name in _VM_ROW_NAMES if raw.get(name) is not None}
    if len(kept) == len(_VM_ROW_NAMES):
        return kept  # every name as written and set, so no other case or legacy name is read
    return {key: value for key, value in raw.items() if isinstance(key, str) and key.lower() in _VM_ROW_FOLDED}


class VmList:
    """A site's whole VM list (one unfiltered ``GET /v1/vms``), each row parsed when first read.

    A ZVM of 10,000 VMs answers 18 MB, and parsing every row cost more than decoding the JSON, while a look-up
    reads a handful: the list is indexed by name, identifier or address read straight from each kept row, and
    only the rows found are parsed, at the price of keeping each row's keys in memory (measured: see the
    benchmarks page).
    """

    __slots__ = ("_indexes", "_raw", "_rows")

    def __init__(self, raw: list[Any]) -> None:
        self._raw = tuple(_kept(row) for row in raw)
        self._rows: list[VmRow | None] = [None] * len(self._raw)
        self._indexes: dict[Callable[[VmList, int], Iterable[str]], dict[str, tuple[int, ...]]] = {}

    def __len__(self) -> int:
        return len(self._raw)

    def __getitem__(self, index: int) -> VmRow:
        row = self._rows[index]
        if row is None:  # a racing reader parses it too: the same value, one of them kept
            row = self._rows[index] = VmRow.from_json(self._raw[index])
        return row

    def __iter__(self) -> Iterator[VmRow]:
        return (self[i] for i in range(len(self._raw)))

    def name_at(self, index: int) -> str | None:
        """``self[index].vm_name``, without parsing the row."""
        return _vm_name(Fields(self._raw[index]))

    def identifier_at(self, index: int) -> str | None:
        """``self[index].vm_identifier``, without parsing the row."""
        return _vm_identifier(Fields(self._raw[index]))

    def ip_addresses_at(self, index: int) -> tuple[str, ...]:
        """``self[index].ip_addresses``, without parsing the row."""
        return _ip_addresses(Fields(self._raw[index]))

    def index(self, keys: Callable[[VmList, int], Iterable[str]]) -> dict[str, tuple[int, ...]]:
        """The positions of the rows by each key ``keys(self, i)`` gives, built once per list and ``keys``; it
        lives and dies with the list, so it never outlives the rows it points at."""
        built = self._indexes.get(keys)
        if built is None:  # a racing builder only repeats the work
            positions: dict[str, list[int]] = {}
            for i in range(len(self._raw)):
                for key in keys(self, i):
                    positions.setdefault(key, []).append(i)
            built = self._indexes[keys] = {key: tuple(found) for key, found in positions.items()}
        return built


def _failover_test_running(f: Fields) -> bool:
    processes = f.child("ActiveProcessesApi", "ActiveProcesses")
    test = processes.child("RunningFailOverTestApi", "RunningFailOverTest")
    return test.get("Stage") is not None


@dataclass(frozen=True)
class JournalHistory:
    """A VPG's ``HistoryStatusApi``: how far back its journal reaches, and its oldest checkpoint. Each field is
    None when the ZVM leaves it out (which ones a ZVM fills is undocumented); ``actual_minutes`` is the history
    the journal holds now, ``configured_minutes`` the history it is set to keep."""

    actual_minutes: int | None = None
    configured_minutes: int | None = None
    earliest: Checkpoint | None = None

    @classmethod
    def from_json(cls, raw: object) -> JournalHistory:
        f = Fields(raw)
        actual, configured = f.integer("ActualHistoryInMinutes"), f.integer("ConfiguredHistoryInMinutes")
        return cls(
            # A negative history is nonsense, not a fact to estimate from.
            actual_minutes=actual if actual is not None and actual >= 0 else None,
            configured_minutes=configured if configured is not None and configured > 0 else None,
            earliest=_optional_checkpoint(f.get("EarliestCheckpoint")),
        )


@dataclass(frozen=True)
class Vpg:
    identifier: str | None
    name: str | None
    status: int | None
    sub_status: int | None
    protected_site: SiteLink
    recovery_site: SiteLink
    protected_site_name: str | None
    recovery_site_name: str | None
    failover_test_running: bool = False
    progress_percentage: int | None = None
    history: JournalHistory = field(default_factory=JournalHistory)

    @classmethod
    def from_json(cls, raw: object) -> Vpg:
        f = Fields(raw)
        progress = f.number("ProgressPercentage")
        return cls(
            identifier=f.text("VpgIdentifier") or _link_identifier(f),
            name=f.text("VpgName"),
            status=f.integer("Status"),
            sub_status=f.integer("SubStatus"),
            protected_site=SiteLink.from_json(f.get("ProtectedSite")),
            recovery_site=SiteLink.from_json(f.get("RecoverySite")),
            protected_site_name=f.text("ProtectedSiteName", "SourceSite"),
            recovery_site_name=f.text("RecoverySiteName", "TargetSite"),
            failover_test_running=_failover_test_running(f),
            progress_percentage=None if progress is None else round(progress),
            history=JournalHistory.from_json(f.get("HistoryStatusApi", "HistoryStatus")),
        )


@dataclass(frozen=True)
class Checkpoint:
    identifier: str | None
    timestamp: datetime | None
    tag: str | None = None
    type: int | None = None

    @classmethod
    def from_json(cls, raw: object) -> Checkpoint:
        f = Fields(raw)
        return cls(
            identifier=f.text("CheckpointIdentifier", "Identifier"),
            timestamp=f.when("TimeStamp"),
            tag=f.text("Tag"),
            type=f.integer("Type"),
        )


def _optional_checkpoint(raw: object) -> Checkpoint | None:
    return Checkpoint.from_json(raw) if Fields(raw) else None


@dataclass(frozen=True)
class CheckpointStats:
    earliest: Checkpoint | None
    latest: Checkpoint | None

    @classmethod
    def from_json(cls, raw: object) -> CheckpointStats:
        f = Fields(raw)
        return cls(
            earliest=_optional_checkpoint(f.get("Earliest")),
            latest=_optional_checkpoint(f.get("Latest")),
        )


@dataclass(frozen=True)
class PointInTime:
    """One entry of ``GET /v1/vms/{id}/pointsInTime``: a checkpoint and whether FLR may mount it."""

    checkpoint: Checkpoint | None
    can_mount: bool | None
    can_mount_reason: str | None = None

    @classmethod
    def from_json(cls, raw: object) -> PointInTime:
        f = Fields(raw)
        can = f.child("CanMount")
        return cls(
            checkpoint=_optional_checkpoint(f.get("Checkpoint")),
            can_mount=can.flag("IsAllowed"),
            can_mount_reason=can.text("Reason"),
        )


@dataclass(frozen=True)
class Task:
    """A ZVM task. ``completed``: State 6; ``failed``: ended any other way (as in the official SDK, anything
    neither InProgress nor Completed: Failed, Stopped, Paused, waiting for input, cancelling)."""

    identifier: str | None
    type: str | None
    state: int | None
    progress: int | None
    complete_reason: str | None
    started: datetime | None = None
    completed_at: datetime | None = None
    vpg_identifiers: tuple[str, ...] = ()  # RelatedEntities.Vpgs

    @property
    def completed(self) -> bool:
        return self.state == TASK_COMPLETED

    @property
    def failed(self) -> bool:
        return self.state is not None and self.state not in (TASK_IN_PROGRESS, TASK_COMPLETED)

    @classmethod
    def from_json(cls, raw: object) -> Task:
        f = Fields(raw)
        status = f.child("Status")
        # Some captures flatten Status to the bare state number.
        state = status.integer("State") if status else f.integer("Status", "State")
        return cls(
            identifier=f.text("TaskIdentifier") or _link_identifier(f),
            type=f.text("Type"),
            state=state,
            progress=status.integer("Progress") if status else f.integer("Progress"),
            complete_reason=f.text("CompleteReason"),
            started=f.when("Started"),
            completed_at=f.when("Completed"),
            vpg_identifiers=tuple(
                ident for link in f.child("RelatedEntities").items("Vpgs") if (ident := Fields(link).text("identifier"))
            ),
        )


@dataclass(frozen=True)
class FlrSession:
    """An FLR session (``FlrSessionInformationApi``). ``is_terminal``: it failed or is gone or going (unmount
    states are undocumented for 10.x, so any status naming an unmount counts)."""

    identifier: str | None
    status: str | None
    vm_identifier: str | None
    vpg_identifier: str | None
    checkpoint_identifier: str | None
    mount_time: datetime | None
    site_identifier: str | None
    session_type: str | None = None
    selected_path: str | None = None
    running_tasks: int | None = None

    @property
    def is_mounted(self) -> bool:
        return (self.status or "").lower() in _FLR_MOUNTED

    @property
    def is_terminal(self) -> bool:
        status = (self.status or "").lower()
        return "failed" in status or "unmount" in status or status in _FLR_GONE

    @property
    def is_unmounted(self) -> bool:
        """Still listed, but the unmount is over (some ZVMs list ended sessions for a while)."""
        status = (self.status or "").lower()
        return status in _FLR_GONE or ("unmount" in status and ("complet" in status or "success" in status))

    @classmethod
    def from_json(cls, raw: object) -> FlrSession:
        f = Fields(raw)
        return cls(
            identifier=f.text("FlrSessionIdentifier") or _link_identifier(f),
            status=f.text("FlrSessionStatus", "Status"),
            vm_identifier=f.text("VmIdentifier"),
            vpg_identifier=f.text("VpgIdentifier"),
            checkpoint_identifier=f.text("CheckpointIdentifier"),
            mount_time=f.when("MountTime"),
            site_identifier=f.text("SiteIdentifier"),
            session_type=f.text("FlrSessionType"),
            selected_path=f.text("SelectedPath"),
            running_tasks=f.integer("NumberOfRelatedRunningTasks"),
        )


@dataclass(frozen=True)
class BrowseItem:
    """One entry of an FLR browse. ``path`` is the full path from the mount root."""

    path: str
    type: str | None
    is_browsable: bool = False
    is_downloadable: bool = False
    size_in_bytes: int | None = None
    not_downloadable_reason: str | None = None
    creation_time: datetime | None = None
    last_access_time: datetime | None = None
    last_write_time: datetime | None = None

    @property
    def name(self) -> str:
        return self.path.rstrip("/").rsplit("/", 1)[-1]

    @classmethod
    def from_json(cls, raw: object) -> BrowseItem:
        f = Fields(raw)
        download = f.child("DownloadInformation")
        return cls(
            path=f.text("Path") or "",
            type=f.text("Type"),
            is_browsable=bool(f.flag("IsBrowsable")),
            is_downloadable=bool(download.flag("IsDownloadable")),
            size_in_bytes=f.integer("SizeInBytes"),
            not_downloadable_reason=download.text("AdditionalInformation"),
            creation_time=f.when("CreationTime"),
            last_access_time=f.when("LastAccessTime"),
            last_write_time=f.when("LastWriteTime"),
        )


@dataclass(frozen=True)
class BrowseResult:
    main: BrowseItem | None
    items: list[BrowseItem] = field(default_factory=list)

    @classmethod
    def from_json(cls, raw: object) -> BrowseResult:
        f = Fields(raw)
        main_raw: Any = f.get("MainPathItem")
        return cls(
            main=BrowseItem.from_json(main_raw) if Fields(main_raw) else None,
            items=[BrowseItem.from_json(item) for item in f.items("PathItems")],
        )


@dataclass(frozen=True)
class DownloadResult:
    """What ``flr_download`` wrote to the sink: byte count and sha256 of the file itself."""

    size: int
    sha256: str
    zipped: bool
    member_name: str | None = None
