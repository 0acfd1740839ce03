"""The simulator's whole state and the operations on it (the API and control layers only
translate HTTP to these calls). One asyncio loop owns it: no method awaits, so no locks."""

from __future__ import annotations

import time
from collections import Counter, defaultdict, deque
from functools import partial
from typing import Any

from . import flr as flrmod
from .auth import Tokens
from .config import SimConfig
from .content import Content
from .faults import Faults
from .guestfs import Entry, FsPathError, FsView, GuestFs
from .ids import random_guid
from .inventory import Inventory, Site, Vm, Vpg, build_inventory
from .journal import MIN_AUTO_CHECKPOINT_S, Checkpoint, CheckpointIds, Journal, Task, seeded_journal
from .variants import Variants, VariantTable


class RateMeter:
    """Requests to one site: the total, and the most seen within any one-second window.

    The busiest window's requests are kept (arrival time and route), so a run that went over
    a cap can say which requests made up that second.
    """

    WINDOW_S = 1.0

    def __init__(self) -> None:
        self.total = 0
        self.peak = 0
        self._recent: deque[tuple[float, str]] = deque()
        self._peak_window: list[tuple[float, str]] = []

    def record(self, now: float, what: str = "") -> None:
        self.total += 1
        recent = self._recent
        while recent and recent[0][0] <= now - self.WINDOW_S:
            recent.popleft()
        recent.append((now, what))
        if len(recent) > self.peak:
            self.peak = len(recent)
            self._peak_window = list(recent)

    def as_json(self) -> dict[str, Any]:
        start = self._peak_window[0][0] if self._peak_window else 0.0
        return {
            "peak_per_s": self.peak,
            "requests": self.total,
            "window_s": self.WINDOW_S,
            "peak_window": [
                {"at": round(t, 4), "after_s": round(t - start, 4), "call": what} for t, what in self._peak_window
            ],
        }


class ApiError(Exception):
    """Answered as {"Message": message} with this status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class World:
    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.epoch = time.time()
        self.inv: Inventory = build_inventory(config.seed, config.vms)
        self.journals: dict[str, Journal] = {}
        self.cp_ids = CheckpointIds()
        self.tasks: dict[str, dict[str, Task]] = defaultdict(dict)
        self.flr: dict[str, flrmod.FlrState] = defaultdict(flrmod.FlrState)
        self.variants = VariantTable(config.variants)
        self.tokens = Tokens()
        self.faults = Faults()
        self.latency_ms: dict[str | None, float] = {}
        self.calls: dict[str, Counter[str]] = defaultdict(Counter)
        self.rates: dict[str, RateMeter] = defaultdict(RateMeter)
        # Seconds the simulated world runs ahead of the real clock (POST /_sim/clock): tests
        # let hours pass (checkpoints age out of journals, tokens expire) without waiting.
        self.time_shift_s = 0.0
        # Automatic journal checkpoints every this many seconds, for journals not told otherwise.
        self.auto_checkpoint_s = config.auto_checkpoint_s

    def now(self) -> float:
        """True time in the simulated world (each site's ZVM may show it off, see site_time)."""
        return time.time() + self.time_shift_s

    def advance_clock(self, seconds: float) -> float:
        """Move the simulated world's time forward; returns the new shift. Never backwards:
        tasks, sessions and tokens assume time only moves on."""
        if seconds < 0:
            raise ApiError(400, "the clock only moves forward: seconds must be >= 0")
        self.time_shift_s += seconds
        return self.time_shift_s

    # ---- lookups that answer API errors ---------------------------------------------------
    def site(self, slug: str) -> Site | None:
        return self.inv.sites.get(slug.lower())

    def vpg_at(self, site: Site, vpg_id: str) -> Vpg:
        vpg = self.inv.vpg(vpg_id)
        if vpg is None or site.slug not in (vpg.protected, vpg.recovery):
            raise ApiError(404, f"VPG with identifier '{vpg_id}' was not found")
        return vpg

    def vm_at(self, site: Site, vm_id: str) -> Vm:
        vm = self.inv.vm(vm_id)
        if vm is None or not any(site.slug in (v.protected, v.recovery) for v in self.inv.vpgs_of(vm)):
            raise ApiError(404, f"VM with identifier '{vm_id}' was not found")
        return vm

    def one_vm(self, ref: str) -> Vm:
        found = self.inv.find_vm(ref)
        if not found:
            raise ApiError(404, f"no VM named or identified '{ref}'")
        if len(found) > 1:
            ids = ", ".join(vm.identifier for vm in found)
            raise ApiError(409, f"{len(found)} VMs are named '{ref}' ({ids}); use an identifier")
        return found[0]

    def one_vpg(self, ref: str) -> Vpg:
        found = self.inv.find_vpg(ref)
        if len(found) != 1:
            raise ApiError(404 if not found else 409, f"no single VPG named or identified '{ref}'")
        return found[0]

    def site_guid(self, slug: str) -> str:
        return self.inv.sites[slug].identifier

    def record_call(self, slug: str, key: str) -> None:
        self.calls[slug][key] += 1
        self.rates[slug].record(self.now(), key)

    def variant(self, slug: str) -> Variants:
        return self.variants.of(slug)

    def site_time(self, slug: str, true_time: float) -> float:
        """A moment as this site's ZVM shows it (its clock may be off)."""
        return true_time + self.variants.of(slug).clock_offset_s

    def true_time(self, slug: str, site_time: float) -> float:
        """A moment this site's ZVM was given (a filter date), on the true clock."""
        return site_time - self.variants.of(slug).clock_offset_s

    # ---- checkpoints and tasks ------------------------------------------------------------
    def journal(self, vpg: Vpg) -> Journal:
        key = vpg.identifier.lower()
        if key not in self.journals:
            self.journals[key] = self._seeded_journal(vpg)
        return self.journals[key]

    def _seeded_journal(self, vpg: Vpg) -> Journal:
        return seeded_journal(vpg.index, self.epoch, self.config.journal_history_s, self.auto_checkpoint_s)

    def journal_history(self, vpg: Vpg) -> tuple[float, float, Checkpoint | None]:
        """(configured history s, actual history s, earliest listed checkpoint) of a VPG's journal."""
        now = self.now()
        key = vpg.identifier.lower()
        # Listing thousands of VPGs must not build thousands of journals: an untouched one is
        # the seeded journal, whose facts follow from the seed alone.
        journal = self.journals.get(key) or self._seeded_journal(vpg)
        return journal.history_s, journal.actual_history_s(now), journal.earliest(now)

    def set_journal_history(self, vpg: Vpg, history_s: float) -> Journal:
        """Change how much history a VPG's journal keeps (a VPG setting on a real ZVM)."""
        if history_s <= 0:
            raise ApiError(400, "the journal history must be longer than 0")
        journal = self.journal(vpg)
        journal.history_s = history_s
        return journal

    def insert_checkpoint(self, site: Site, vpg: Vpg, tag: str) -> Task:
        if vpg.in_initial_sync:
            raise ApiError(
                400,
                f"VPG '{vpg.name}' is in initial sync; a checkpoint cannot be "
                "added until the synchronization completes",
            )
        now = self.now()
        done_at = now + self.config.task_seconds
        delay = self.faults.take("task_delay", site.slug)
        if delay:
            done_at = now + float(delay.params["seconds"])
        fail = self.faults.take("task_fail", site.slug)
        task = self._new_task(site, "InsertTaggedCP", now, done_at, vpg_id=vpg.identifier)
        if fail:
            task.fail_message = str(fail.params.get("message") or "Failed to insert the checkpoint")
            return task
        visible_at: float | None = done_at
        if self.faults.take("checkpoint_never_listed", site.slug):
            visible_at = None
        else:
            slow = self.faults.take("checkpoint_listing_delay", site.slug)
            if slow:
                visible_at = done_at + float(slow.params["seconds"])
        self.journal(vpg).checkpoints.append(
            Checkpoint(self.cp_ids.next(), now, tag, 1, self._captures(vpg), visible_at)
        )
        return task

    def _captures(self, vpg: Vpg) -> dict[str, FsView]:
        """Frozen views of the VPG's guest trees as they are now (copy on write: O(partitions))."""
        return {vm.identifier.lower(): view for vm in self.inv.vms_of(vpg) if (view := vm.capture()) is not None}

    def _seal(self, vpg: Vpg) -> None:
        """Fix the VPG's pending automatic checkpoints to the trees as they are now."""
        self.journal(vpg).seal(self.now(), partial(self._captures, vpg))

    def set_auto_checkpoints(self, vpg: Vpg | None, seconds: float) -> None:
        """An automatic journal checkpoint every ``seconds`` from now on (0: none), for one VPG or
        (``vpg`` None) every VPG. Those taken so far stay."""
        if seconds != 0 and not seconds >= MIN_AUTO_CHECKPOINT_S:
            raise ApiError(400, f"auto_checkpoint_s must be 0 (none) or at least {MIN_AUTO_CHECKPOINT_S}")
        now = self.now()
        if vpg is not None:
            self.journal(vpg).set_auto_interval(seconds, now, partial(self._captures, vpg))
            return
        self.auto_checkpoint_s = seconds
        for each in self.inv.vpgs.values():
            self.journal(each).set_auto_interval(seconds, now, partial(self._captures, each))

    def _new_task(self, site: Site, type_: str, started: float, done_at: float | None, **links: Any) -> Task:
        task = Task(f"{random_guid()}.{site.identifier}", type_, site.slug, started, done_at, **links)
        task.generation = len(self.tasks[site.slug]) + 1
        self.tasks[site.slug][task.identifier.lower()] = task
        return task

    def task(self, site: Site, task_id: str) -> Task:
        task = self.tasks[site.slug].get(task_id.lower())
        if task is None:
            raise ApiError(404, f"Task with identifier '{task_id}' was not found")
        return task

    def resync(self, vpg: Vpg) -> None:
        old = self.journal(vpg)
        self.journals[vpg.identifier.lower()] = Journal(
            [],
            started_at=self.now(),
            history_s=old.history_s,
            vpg_index=vpg.index,
            auto_interval_s=old.auto_interval_s,
        )

    # ---- FLR ------------------------------------------------------------------------------
    def sessions(self, slug: str) -> flrmod.FlrState:
        state = self.flr[slug]
        variant = self.variant(slug)
        state.prune(self.now(), variant.unmounted_linger_s if variant.unmounted_state else 0.0)
        return state

    def _mount_target(
        self, site: Site, vpg_id: str, vm_id: str, checkpoint_id: str | None
    ) -> tuple[Vpg, Vm, Checkpoint]:
        """Validate a mount request (400 with a reason otherwise)."""
        vpg = self.inv.vpg(vpg_id or "")
        if vpg is None:
            raise ApiError(400, f"VPG with identifier '{vpg_id}' was not found")
        vm = self.inv.vm(vm_id or "")
        if vm is None or vm.identifier not in vpg.vm_ids:
            raise ApiError(400, f"VM '{vm_id}' is not protected by VPG '{vpg.name}'")
        if site.slug != vpg.recovery:
            rec = self.inv.sites[vpg.recovery].name
            raise ApiError(
                400,
                f"File level recovery of VPG '{vpg.name}' runs on its recovery site ({rec}); this ZVM is {site.name}",
            )
        if vpg.in_initial_sync:
            raise ApiError(400, f"VPG '{vpg.name}' is in initial sync; no checkpoint can be mounted")
        self._seal(vpg)  # an automatic checkpoint mounted now holds the trees as they are
        journal = self.journal(vpg)
        if checkpoint_id is None:  # only the control API omits it: take the latest
            listed = journal.listed(self.now())
            if not listed:
                raise ApiError(400, f"VPG '{vpg.name}' has no checkpoints")
            return vpg, vm, listed[-1]
        found = journal.get(str(checkpoint_id), self.now())
        aged = journal.aged_out(str(checkpoint_id), self.now()) if found is None else None
        if aged is not None and self.variant(site.slug).aged_checkpoint_mount == "mount_failed":
            return vpg, vm, aged  # the mount starts, then fails (flr_mount sees it aged)
        if found is None:
            raise ApiError(
                400,
                f"failed parsing as a valid CheckPoint Identifier: "
                f"'{checkpoint_id}' is not a checkpoint of VPG '{vpg.name}'",
            )
        return vpg, vm, found

    def flr_mount(
        self,
        site: Site,
        vpg_id: str,
        vm_id: str,
        checkpoint_id: str | None,
        initial_path: str | None = None,
        foreign: bool = False,
    ) -> flrmod.FlrSession:
        """Open a session on the checkpoint's captured tree; faults apply to our own mounts only."""
        vpg, vm, checkpoint = self._mount_target(site, vpg_id, vm_id, checkpoint_id)
        now = self.now()
        view = checkpoint.captures.get(vm.identifier.lower()) or vm.pristine(self.epoch)
        ready_at = now + self.config.mount_seconds
        # A checkpoint that left the journal cannot be mounted (variant aged_checkpoint_mount).
        fails = not self.journal(vpg).in_history(checkpoint, now)
        if not foreign:
            slow = self.faults.take("mount_delay", site.slug)
            if slow:
                ready_at = now + float(slow.params["seconds"])
            fails = self.faults.take("mount_fail", site.slug) is not None or fails
        session = flrmod.FlrSession(
            f"{random_guid()}.{site.identifier}",
            site.slug,
            vm.identifier,
            vpg.identifier,
            checkpoint.identifier,
            view,
            now,
            ready_at,
            fails,
            initial_path,
            foreign,
        )
        self.flr[site.slug].sessions[session.identifier.lower()] = session
        return session

    def flr_session(self, site: Site, session_id: str) -> flrmod.FlrSession:
        session = self.sessions(site.slug).sessions.get(session_id.lower())
        if session is None:
            raise ApiError(404, f"FLR session '{session_id}' was not found")
        return session

    def _mounted(self, site: Site, session_id: str) -> flrmod.FlrSession:
        session = self.flr_session(site, session_id)
        status = session.status(self.now())
        if status != flrmod.MOUNTED:
            raise ApiError(400, f"FLR session '{session_id}' is not mounted (status {status})")
        return session

    def flr_browse(self, site: Site, session_id: str, path: str) -> tuple[Entry | None, list[Entry]]:
        session = self._mounted(site, session_id)
        if "\\" in path:
            raise ApiError(400, "Paths use '/' only; backslash is not supported")
        view = session.view
        if path.strip("/") == "":
            return None, view.roots()
        entry = self._entry(site, view, path)
        return entry, view.children(entry)

    def flr_download(self, site: Site, session_id: str, paths: list[str]) -> flrmod.Download:
        session = self._mounted(site, session_id)
        variant = self.variant(site.slug)
        files = []
        for path in paths:
            if "\\" in path:
                raise ApiError(400, "Paths use '/' only; backslash is not supported")
            entry = self._entry(site, session.view, path)
            if entry.kind != "File" or entry.node is None:
                raise ApiError(400, f"'{path}' is a {entry.kind.lower()}; only files can be downloaded")
            files.append((_member_name(entry.path, variant.zip_member), entry.node))
        zipped = variant.download_format == "zip" or len(files) > 1
        download = flrmod.Download(
            f"{random_guid()}.{site.identifier}",
            site.slug,
            session.identifier,
            files,
            zipped,
            ready_at=self.now() + variant.download_ready_after_s,
        )
        self.flr[site.slug].downloads[download.identifier.lower()] = download
        return download

    def download(self, slug: str, download_id: str) -> flrmod.Download:
        self.sessions(slug)
        found = self.flr[slug].downloads.get(download_id.lower())
        if found is None:
            raise ApiError(404, f"Download '{download_id}' was not found or has expired")
        if self.now() < found.ready_at:
            raise ApiError(
                self.variant(slug).download_pending_status,
                f"Download '{download_id}' is being prepared; try again later",
            )
        return found

    def flr_unmount(self, site: Site, session_id: str) -> Task:
        session = self.flr_session(site, session_id)
        if session.unmount_task is not None:
            return self.task(site, session.unmount_task)
        if self.faults.take("unmount_fail", site.slug):
            raise ApiError(500, f"Failed to unmount FLR session '{session_id}'")
        now = self.now()
        session.unmount_at = now + self.config.unmount_seconds
        task = self._new_task(
            site, "FlrJournalUnmount", now, session.unmount_at, vpg_id=session.vpg_id, flr_session_id=session.identifier
        )
        session.unmount_task = task.identifier
        return task

    def restart(self, slug: str | None) -> None:
        for site in self.inv.sites.values():
            if slug is None or site.slug == slug:
                self.flr[site.slug].clear()
        self.tokens.drop(slug)

    def _entry(self, site: Site, view: FsView, path: str) -> Entry:
        """The entry at an FLR path, matched as this ZVM matches names; a missing one is the
        variant's status with the message an independent ZVM gave."""
        variant = self.variant(site.slug)
        try:
            return view.entry(path, fold_ntfs=variant.ntfs_case == "insensitive")
        except FsPathError as exc:
            raise ApiError(variant.browse_missing_status, f"Path '{path}' was not found") from exc

    # ---- guest files (control API) --------------------------------------------------------
    def live_fs(self, vm: Vm) -> GuestFs:
        return vm.fs(self.epoch)

    def _before_change(self, vm: Vm) -> None:
        """Seal the automatic checkpoints of every VPG protecting ``vm``: they keep the old trees."""
        for vpg in self.inv.vpgs_of(vm):
            self._seal(vpg)

    def set_file(self, vm: Vm, path: str, content: Content) -> str:
        self._before_change(vm)
        try:
            return self.live_fs(vm).write(path, content, self.now())
        except FsPathError as exc:
            raise ApiError(400, str(exc)) from exc

    def delete_file(self, vm: Vm, path: str) -> str:
        self._before_change(vm)
        try:
            return self.live_fs(vm).delete(path)
        except FsPathError as exc:
            raise ApiError(404, str(exc)) from exc

    def read_file(self, vm: Vm, path: str) -> Entry:
        fs = self.live_fs(vm)
        try:
            entry = fs.entry(fs.guest_to_flr(path))
        except FsPathError as exc:
            raise ApiError(404, str(exc)) from exc
        if entry.node is None:
            raise ApiError(400, f"'{path}' is not a file")
        return entry


def _member_name(flr_path: str, naming: str) -> str:
    if naming == "flr_path":
        return flr_path
    if naming == "basename":
        return flr_path.rpartition("/")[2]
    return flr_path.partition("/")[2]
