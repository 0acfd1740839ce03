"""PascalCase JSON shapes of the ZVM 10.x API (what the documentation leaves open: ``zvmsim.variants``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import __version__
from .flr import FAILED, MOUNTED, MOUNTING, UNMOUNTED, UNMOUNTING, FlrSession
from .guestfs import Entry
from .ids import iso
from .inventory import Site, Vm, Vpg
from .journal import Checkpoint, Task
from .world import World

VPG_STATUSES = [
    "Initializing",
    "MeetingSLA",
    "NotMeetingSLA",
    "HistoryNotMeetingSLA",
    "RpoNotMeetingSLA",
    "FailingOver",
    "Moving",
    "Deleting",
    "Recovered",
]

VPG_SUBSTATUSES = [
    "None",
    "InitialSync",
    "Creating",
    "VolumeInitialSync",
    "Sync",
    "RecoveryPossible",
    "DeltaSync",
    "NeedsConfiguration",
    "Error",
    "EmptyProtectionGroup",
    "DisconnectedFromPeerNoRecoveryPoints",
    "FullSync",
    "VolumeDeltaSync",
    "VolumeFullSync",
    "FailingOverCommitting",
    "FailingOverBeforeCommit",
    "FailingOverRollingBack",
    "Promoting",
    "MovingCommitting",
    "MovingBeforeCommit",
    "MovingRollingBack",
    "Deleting",
    "PendingRemove",
    "BitmapSync",
    "DisconnectedFromPeer",
    "ReplicationPausedUserInitiated",
    "ReplicationPausedSystemInitiated",
    "RecoveryStorageProfileError",
    "Backup",
    "RollingBack",
    "RecoveryStorageError",
    "JournalStorageError",
    "VmNotProtectedError",
]

ENTITY_TYPES = {"VCenter": 0, "AWS": 3, "Azure": 5}


def _name(names: list[str], value: int) -> str:
    return names[value] if 0 <= value < len(names) else str(value)


@dataclass(frozen=True)
class Ctx:
    """Who is asking: the world, the site whose ZVM was called and its base URL."""

    world: World
    site: Site
    base: str  # e.g. https://127.0.0.1:8443/site-a

    def link(self, type_: str, path: str, identifier: str) -> dict[str, Any]:
        return {"href": f"{self.base}/v1/{path}", "identifier": identifier, "rel": None, "type": type_}

    def iso(self, true_time: float | None) -> str | None:
        """A moment as this ZVM shows it: on its own clock, which may be off."""
        return None if true_time is None else iso(self.world.site_time(self.site.slug, true_time))

    def site_link(self, slug: str) -> dict[str, Any]:
        target = self.world.inv.sites[slug]
        if slug == self.site.slug:
            return self.link("LocalSiteApi", "localsite", target.identifier)
        return self.link("PeerSiteApi", f"peersites/{target.identifier}", target.identifier)


def local_site(ctx: Ctx) -> dict[str, Any]:
    s = ctx.site
    return {
        "SiteIdentifier": s.identifier,
        "SiteName": s.name,
        "Location": f"{s.name} datacenter",
        "Version": __version__,
        "DisplayVersion": "10.0 U6",
        "ZvmApiVersion": "10.0",
        "ContactEmail": "ops@example.com",
        "ContactName": "Operations",
        "ContactPhone": "",
        "IsReplicationToSelfEnabled": True,
        "UtcOffsetInMinutes": 0,
        "SiteType": s.type,
        "IpAddress": s.ip,
        "BandwidthThrottlingInMBs": -1,
        "SiteTypeVersion": "8.0",
        "PlatformInformation": {"Azure": None, "VCenter": {"Ip": s.ip} if s.type == "VCenter" else None},
        "IsLoginBannerEnabled": False,
        "LoginBanner": None,
        "Link": ctx.link("LocalSiteApi", "localsite", s.identifier),
    }


def peer_site(ctx: Ctx, s: Site) -> dict[str, Any]:
    return {
        "SiteIdentifier": s.identifier,
        "PeerSiteName": s.name,
        "PairingStatus": 0,
        "Location": f"{s.name} datacenter",
        "HostName": f"zvm-{s.slug}.zvmsim.local",
        "Port": 9071,
        "ProvisionedStorage": 0,
        "UsedStorage": 0,
        "IncomingThroughputInMb": 0.0,
        "OutgoingBandWidth": 0.0,
        "Version": __version__,
        "SiteType": s.type,
        "RegionName": "us-east-1" if s.type == "AWS" else None,
        "Link": ctx.link("PeerSiteApi", f"peersites/{s.identifier}", s.identifier),
    }


def checkpoint(ctx: Ctx, cp: Checkpoint | None) -> dict[str, Any] | None:
    if cp is None:
        return None
    return {"CheckpointIdentifier": cp.identifier, "TimeStamp": ctx.iso(cp.timestamp), "Tag": cp.tag, "Type": cp.type}


def _sites_part(ctx: Ctx, vpg: Vpg) -> dict[str, Any]:
    sites = ctx.world.inv.sites
    return {
        "ProtectedSite": ctx.site_link(vpg.protected),
        "RecoverySite": ctx.site_link(vpg.recovery),
        "ProtectedSiteName": sites[vpg.protected].name,
        "RecoverySiteName": sites[vpg.recovery].name,
        "Entities": {
            "Protected": ENTITY_TYPES.get(sites[vpg.protected].type, 0),
            "Recovery": ENTITY_TYPES.get(sites[vpg.recovery].type, 0),
        },
    }


def vm_row(ctx: Ctx, vm: Vm, vpg: Vpg) -> dict[str, Any]:
    ident = f"{vm.identifier}?VpgIdentifier={vpg.identifier}"
    adapter = {"DisplayName": "Network adapter 1", "NetworkIdentifier": "dvportgroup-21", "IpAddresses": [vm.ip]}
    return {
        "VmIdentifier": vm.identifier,
        "VmName": vm.name,
        "VpgIdentifier": vpg.identifier,
        "VpgName": vpg.name,
        "Status": vpg.status,
        "SubStatus": vpg.sub_status,
        "Priority": 1,
        "ActualRPO": None if vpg.in_initial_sync else 7,
        **_sites_part(ctx, vpg),
        "EnabledActions": {"IsFlrEnabled": not vpg.in_initial_sync},
        "IsVmExists": True,
        "LastTest": None,
        "OrganizationName": None,
        "GuestOs": "Microsoft Windows Server 2022 (64-bit)"
        if vm.os_type == "windows"
        else "Debian GNU/Linux 12 (64-bit)",
        "CpuCoresNum": 2,
        "MemorySizeInMB": 4096,
        "HardwareVersion": "vmx-19",
        "ProvisionedStorageInMB": 40960,
        "UsedStorageInMB": 12288,
        "JournalUsedStorageMb": 512,
        "IOPs": 0,
        "ThroughputInMB": 0.0,
        "OutgoingBandWidthInMbps": 0.0,
        "Volumes": [{"VmVolumeIdentifier": "scsi:0:0", "PublicCloudVolumeIdentifier": None}],
        "Nics": [{"NicIdentifier": "Network adapter 1"}],
        "VmNetworkInformation": {"NetworkAdapters": [adapter]},
        "IsAgentInstalled": False,
        "Link": {"href": f"{ctx.base}/v1/vms/{ident}", "identifier": ident, "rel": None, "type": "VmApi"},
    }


def history_status(ctx: Ctx, vpg: Vpg) -> dict[str, Any] | None:
    """HistoryStatusApi: the journal's history in whole minutes (rounded down) and its earliest checkpoint."""
    configured_s, actual_s, earliest = ctx.world.journal_history(vpg)
    full = {
        "ActualHistoryInMinutes": int(actual_s // 60),
        "ConfiguredHistoryInMinutes": int(configured_s // 60),
        "EarliestCheckpoint": checkpoint(ctx, earliest),
    }
    shape = ctx.world.variant(ctx.site.slug).history_status
    if shape == "missing":
        return None
    if shape == "no_actual":
        return {k: v for k, v in full.items() if k != "ActualHistoryInMinutes"}
    if shape == "configured_only":
        return {"ConfiguredHistoryInMinutes": full["ConfiguredHistoryInMinutes"]}
    return full


def vpg_row(ctx: Ctx, vpg: Vpg) -> dict[str, Any]:
    test = {"Stage": "Testing", "StartTime": ctx.iso(ctx.world.epoch)} if vpg.failover_test else None
    return {
        "VpgIdentifier": vpg.identifier,
        "VpgName": vpg.name,
        "VpgDescription": "",
        "Status": vpg.status,
        "StatusDescription": _name(VPG_STATUSES, vpg.status),
        "SubStatus": vpg.sub_status,
        "SubStatusDescription": _name(VPG_SUBSTATUSES, vpg.sub_status),
        "AlertStatus": 0,
        **_sites_part(ctx, vpg),
        "ActiveProcessesApi": {"RunningFailOverTestApi": test},
        "ProgressPercentage": vpg.progress,
        "Priority": 1,
        "VmsCount": len(vpg.vm_ids),
        "ProvisionedStorageInMB": 40960 * len(vpg.vm_ids),
        "UsedStorageInMB": 12288 * len(vpg.vm_ids),
        "IOPs": 0,
        "ThroughputInMB": 0.0,
        "ActualRPO": None if vpg.in_initial_sync else 7,
        "ConfiguredRpoSeconds": 300,
        "BackupEnabled": False,
        "ServiceProfile": None,
        "Zorg": None,
        "LastTest": None,
        "OrganizationName": None,
        "FailSafeHistory": {"ActualFailSafeHistory": 0, "ConfiguredFailSafeHistory": 0, "FailSafeDescription": "Off"},
        "HistoryStatusApi": history_status(ctx, vpg),
        "Link": ctx.link("VpgApi", f"vpgs/{vpg.identifier}", vpg.identifier),
    }


def task(ctx: Ctx, t: Task) -> dict[str, Any]:
    state, progress, completed = t.state(ctx.world.now())
    vpgs = []
    if t.vpg_id:
        vpgs.append(ctx.link("VpgApi", f"vpgs/{t.vpg_id}", t.vpg_id))
    flrs = [ctx.link("FlrSessionApi", f"flrs/{t.flr_session_id}", t.flr_session_id)] if t.flr_session_id else []
    reason = (t.fail_message or "") if state == 4 else ""
    return {
        "TaskIdentifier": t.identifier,
        "Type": t.type,
        "InitiatedBy": "admin",
        "IsCancellable": False,
        "Started": ctx.iso(t.started),
        "Completed": ctx.iso(completed),
        "CompleteReason": reason,
        "Status": {"State": state, "Progress": progress},
        "RelatedEntities": {"Vpgs": vpgs, "Sites": [ctx.site_link(ctx.site.slug)], "Hosts": [], "FlrSessions": flrs},
        "Generation": t.generation,
        "Link": ctx.link("TaskApi", f"tasks/{t.identifier}", t.identifier),
    }


def flr_state_name(ctx: Ctx, status: str) -> str:
    """The name this ZVM gives an internal session state (the names are a variant)."""
    v = ctx.world.variant(ctx.site.slug)
    names = {
        MOUNTING: v.mounting_state,
        MOUNTED: v.mounted_state,
        FAILED: v.mount_failed_state,
        UNMOUNTING: v.unmounting_state,
        UNMOUNTED: v.unmounted_state or UNMOUNTED,
    }
    return names[status]


def flr_session(ctx: Ctx, s: FlrSession) -> dict[str, Any]:
    status = s.status(ctx.world.now())
    return {
        "FlrSessionIdentifier": s.identifier,
        "FlrSessionStatus": flr_state_name(ctx, status),
        "FlrSessionType": "jflr",
        "VmIdentifier": s.vm_id,
        "VmVolumeIdentifier": None,
        "VpgIdentifier": s.vpg_id,
        "CheckpointIdentifier": s.checkpoint_id,
        "MountTime": ctx.iso(s.mount_time),
        "SelectedPath": s.initial_path,
        "NumberOfRelatedRunningTasks": 1 if status in (MOUNTING, UNMOUNTING) else 0,
        "RepositoryIdentifier": None,
        "RetentionSetIdentifier": None,
        "SiteIdentifier": ctx.world.site_guid(s.site),
    }


def path_item(entry: Entry) -> dict[str, Any]:
    is_file = entry.kind == "File"
    mtime = entry.node.mtime if entry.node else entry.ctime
    return {
        "Path": entry.path,
        "Type": entry.kind,
        "IsBrowsable": not is_file,
        "SizeInBytes": entry.node.content.size if entry.node else None,
        "DownloadInformation": {
            "IsDownloadable": is_file,
            "AdditionalInformation": None if is_file else "Only files can be downloaded",
        },
        "CreationTime": iso(entry.ctime),
        "LastAccessTime": iso(mtime),
        "LastWriteTime": iso(mtime),
    }


def root_item(epoch: float) -> dict[str, Any]:
    return {
        "Path": "",
        "Type": "Partition",
        "IsBrowsable": True,
        "SizeInBytes": None,
        "DownloadInformation": {"IsDownloadable": False, "AdditionalInformation": None},
        "CreationTime": iso(epoch),
        "LastAccessTime": iso(epoch),
        "LastWriteTime": iso(epoch),
    }
