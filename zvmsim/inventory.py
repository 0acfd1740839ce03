"""Sites, VMs and VPGs: the deterministic demo inventory plus seeded filler VMs, with the
indices every lookup goes through (by id, by lower-cased name, by site), so a filtered
/v1/vms call costs the same at 10 VMs and at 10,000."""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass, field

from .guestfs import FsView, GuestFs
from .ids import guid
from .trees import build_tree


@dataclass
class Site:
    slug: str
    name: str
    identifier: str
    type: str  # "VCenter" | "AWS" | "Azure"
    server_guid: str
    ip: str


@dataclass
class Vpg:
    index: int
    identifier: str
    name: str
    protected: str  # site slug
    recovery: str  # site slug
    vm_ids: list[str] = field(default_factory=list)
    status: int = 1
    sub_status: int = 0
    failover_test: bool = False
    progress: int = 100

    @property
    def in_initial_sync(self) -> bool:
        return self.status == 0 or self.sub_status in (1, 3)


@dataclass
class Vm:
    identifier: str
    name: str
    ip: str
    template: str  # key of trees.TEMPLATES
    seed: int
    vpg_ids: list[str] = field(default_factory=list)
    _fs: GuestFs | None = None
    _pristine: FsView | None = None

    @property
    def os_type(self) -> str:
        return "windows" if self.template in ("win01", "windows") else "linux"

    def fs(self, epoch: float) -> GuestFs:
        """The live guest tree, built on first use (10,000 VMs must start in seconds)."""
        if self._fs is None:
            self._fs = build_tree(self.template, self.name, self.ip, self.seed, epoch)
            self._pristine = self._fs.snapshot()
        return self._fs

    def capture(self) -> FsView | None:
        """A frozen view of the live tree, or None while it is still the pristine one."""
        return self._fs.snapshot() if self._fs is not None else None

    def pristine(self, epoch: float) -> FsView:
        """The seed tree: what every checkpoint taken before the simulator started holds."""
        self.fs(epoch)
        assert self._pristine is not None
        return self._pristine


SITES = [
    ("site-a", "Site A", "VCenter", "192.168.10.10"),
    ("site-b", "Site B", "VCenter", "192.168.20.10"),
    ("site-c", "Site C", "VCenter", "192.168.30.10"),
    ("site-aws", "Site AWS", "AWS", "172.31.0.10"),
]

# (vm name, moref number, ip, template, protected site, [(vpg name, recovery site)])
DEMO_VMS = [
    ("web01", 101, "10.0.0.11", "web01", "site-a", [("vpg-web", "site-b"), ("vpg-web-dr", "site-b")]),
    (
        "app01",
        102,
        "10.0.0.12",
        "app01",
        "site-a",
        [("vpg-app-1", "site-b"), ("vpg-app-2", "site-b"), ("vpg-app-3", "site-c")],
    ),
    ("db01", 103, "10.0.0.13", "db01", "site-a", [("vpg-db", "site-b")]),
    ("win01", 104, "10.0.0.21", "win01", "site-b", [("vpg-win", "site-a")]),
    ("newvm01", 105, "10.0.0.14", "linux", "site-a", [("vpg-new", "site-b")]),
    ("cloud01", 106, "10.0.0.41", "linux", "site-aws", [("vpg-cloud", "site-b")]),
    ("edge01", 107, "10.0.0.51", "linux", "site-c", [("vpg-edge", "site-b")]),
    ("dup01", 108, "10.0.0.31", "linux", "site-a", [("vpg-dup-1", "site-b")]),
    ("dup01", 109, "10.0.0.32", "linux", "site-a", [("vpg-dup-2", "site-b")]),
]

VCENTER_SLUGS = ("site-a", "site-b", "site-c")


class Inventory:
    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.sites: dict[str, Site] = {}
        self.sites_by_id: dict[str, Site] = {}
        self.vms: dict[str, Vm] = {}  # lower-cased identifier -> VM
        self.vms_by_name: dict[str, list[Vm]] = defaultdict(list)
        self.vpgs: dict[str, Vpg] = {}  # lower-cased identifier -> VPG
        self.vpgs_by_name: dict[str, list[Vpg]] = defaultdict(list)
        self.vpgs_by_site: dict[str, list[Vpg]] = defaultdict(list)

    # ---- building -------------------------------------------------------------------------
    def add_site(self, slug: str, name: str, type_: str, ip: str) -> Site:
        site = Site(slug, name, guid(self.seed, f"site:{slug}"), type_, guid(self.seed, f"server:{slug}"), ip)
        self.sites[slug] = site
        self.sites_by_id[site.identifier] = site
        return site

    def add_vm(self, name: str, moref: int, ip: str, template: str, site: str, seed: int) -> Vm:
        vm = Vm(f"{self.sites[site].server_guid}.vm-{moref}", name, ip, template, seed)
        self.vms[vm.identifier.lower()] = vm
        self.vms_by_name[name.lower()].append(vm)
        return vm

    def add_vpg(self, name: str, protected: str, recovery: str, vms: list[Vm]) -> Vpg:
        vpg = Vpg(len(self.vpgs), guid(self.seed, f"vpg:{name}"), name, protected, recovery)
        self.vpgs[vpg.identifier.lower()] = vpg
        self.vpgs_by_name[name.lower()].append(vpg)
        self.vpgs_by_site[protected].append(vpg)
        if recovery != protected:
            self.vpgs_by_site[recovery].append(vpg)
        for vm in vms:
            vpg.vm_ids.append(vm.identifier)
            vm.vpg_ids.append(vpg.identifier)
        return vpg

    # ---- lookups --------------------------------------------------------------------------
    def vm(self, identifier: str) -> Vm | None:
        return self.vms.get(identifier.lower())

    def vpg(self, identifier: str) -> Vpg | None:
        return self.vpgs.get(identifier.lower())

    def vms_named(self, name: str) -> list[Vm]:
        return self.vms_by_name.get(name.lower(), [])

    def vpgs_named(self, name: str) -> list[Vpg]:
        return self.vpgs_by_name.get(name.lower(), [])

    def vpgs_of(self, vm: Vm) -> list[Vpg]:
        return [self.vpgs[v.lower()] for v in vm.vpg_ids]

    def vms_of(self, vpg: Vpg) -> list[Vm]:
        return [self.vms[v.lower()] for v in vpg.vm_ids]

    def find_vm(self, name_or_id: str) -> list[Vm]:
        found = self.vm(name_or_id)
        return [found] if found else self.vms_named(name_or_id)

    def find_vpg(self, name_or_id: str) -> list[Vpg]:
        found = self.vpg(name_or_id)
        return [found] if found else self.vpgs_named(name_or_id)


def build_inventory(seed: int, filler_vms: int) -> Inventory:
    inv = Inventory(seed)
    for slug, name, type_, ip in SITES:
        inv.add_site(slug, name, type_, ip)
    for name, moref, ip, template, site, vpgs in DEMO_VMS:
        vm = inv.add_vm(name, moref, ip, template, site, seed * 1000 + moref)
        for vpg_name, recovery in vpgs:
            inv.add_vpg(vpg_name, site, recovery, [vm])
    inv.vpgs_named("vpg-new")[0].status = 0
    inv.vpgs_named("vpg-new")[0].sub_status = 1
    inv.vpgs_named("vpg-new")[0].progress = 37
    _add_filler(inv, seed, filler_vms)
    return inv


def _add_filler(inv: Inventory, seed: int, count: int) -> None:
    """Filler VMs in groups of 1-4 sharing a VPG, each VM also in 0-2 VPGs of its own (1-3 in
    all), spread over the VCenter sites. A few VPGs are in initial sync or in a failover test."""
    rng = random.Random(f"zvmsim-filler:{seed}")
    width = max(5, len(str(count)))
    number = 1
    group_no = 1
    while number <= count:
        size = min(rng.randint(1, 4), count - number + 1)
        protected = rng.choice(VCENTER_SLUGS)
        others = [s for s in VCENTER_SLUGS if s != protected]
        group: list[Vm] = []
        for _ in range(size):
            name = f"vm-{number:0{width}d}"
            template = "windows" if rng.random() < 0.2 else "linux"
            ip = f"10.{100 + (number >> 16) % 100}.{(number >> 8) & 0xFF}.{number & 0xFF}"
            group.append(inv.add_vm(name, 1000 + number, ip, template, protected, seed * 7919 + number))
            number += 1
        _set_state(inv.add_vpg(f"vpg-{group_no:0{width}d}", protected, rng.choice(others), group), rng)
        group_no += 1
        for vm in group:
            for extra in range(rng.choice((0, 0, 1, 2))):
                vpg = inv.add_vpg(f"{vm.name}-dr{extra + 1}", protected, rng.choice(others), [vm])
                _set_state(vpg, rng)


def _set_state(vpg: Vpg, rng: random.Random) -> None:
    roll = rng.random()
    if roll < 0.03:
        vpg.status, vpg.sub_status, vpg.progress = 0, 1, rng.randint(1, 99)
    elif roll < 0.05:
        vpg.failover_test = True
