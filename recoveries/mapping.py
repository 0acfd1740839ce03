"""Map a guest path to the one FLR path that holds it, by browsing the mounted checkpoint.

FLR shows partitions (``partition#2 Ext4``), not mount points or drive letters, so:

- Linux: ``/a/b/c`` is tried as ``<partition>/a/b/c`` on every partition, and as
  ``<partition>/b/c`` and ``<partition>/c`` for the candidate mount points ``/a`` and
  ``/a/b`` (a separate ``/boot`` partition holds ``grub/grub.cfg``, not ``boot/grub/grub.cfg``).
- Windows: ``C:\\a\\b`` is tried as ``<partition>/a/b`` on every partition except System
  Reserved; when several hold it, the one with the ``Windows`` folder is C:.

Exactly one match is used; none or several is an error naming what was looked at. Each
folder is listed at most once per mapping (parents are browsed, so files need not be browsable).
"""

from __future__ import annotations

from dataclasses import dataclass

from recoveries.paths import GuestPath
from recoveries.sessions import session_lookup
from rewind.errors import ApplicationError, NotFoundError
from rewind.zvm import BrowseItem, ZvmClient, ZvmNotFoundError


class SessionVanished(Exception):
    """The FLR session is gone (ZVM restart, unmount by someone else)."""


@dataclass(frozen=True)
class Match:
    flr_path: str
    item: BrowseItem


class _Browser:
    def __init__(self, client: ZvmClient, session_id: str, vm_identifier: str) -> None:
        self.client = client
        self.session_id = session_id
        self.vm_identifier = vm_identifier
        self.cache: dict[str, dict[str, BrowseItem] | None] = {}
        self.session_checked = False

    def listing(self, folder: str) -> dict[str, BrowseItem] | None:
        """Children of ``folder`` by name; None when the folder does not exist."""
        if folder not in self.cache:
            try:
                result = self.client.flr_browse(self.session_id, folder)
                self.cache[folder] = {item.name: item for item in result.items}
            except ZvmNotFoundError:
                self._check_session()
                self.cache[folder] = None
        return self.cache[folder]

    def _check_session(self) -> None:
        # A 404 means "no such folder" or "no such session": tell them apart once.
        if self.session_checked:
            return
        try:
            session = session_lookup(self.client, self.session_id, self.vm_identifier)
        except ZvmNotFoundError:
            raise SessionVanished(self.session_id) from None
        if session.is_terminal:
            raise SessionVanished(self.session_id)
        self.session_checked = True

    def lookup(self, flr_path: str, case_insensitive: bool) -> BrowseItem | None:
        parent, _, name = flr_path.rpartition("/")
        children = self.listing(parent)
        if not children:
            return None
        if name in children:
            return children[name]
        if case_insensitive:
            for key, item in children.items():
                if key.lower() == name.lower():
                    return item
        return None


def map_guest_path(client: ZvmClient, session_id: str, guest: GuestPath, *, vm_identifier: str) -> Match:
    """The single file ``guest`` names in the mounted session. Raises ``ApplicationError``."""
    browser = _Browser(client, session_id, vm_identifier)
    partitions = browser.listing("")
    if partitions is None:
        raise SessionVanished(session_id)
    parts = [item.path.strip("/") for item in partitions.values()]
    if guest.os == "windows":
        matches = _windows(browser, parts, guest)
    else:
        matches = _linux(browser, parts, guest)
    return _one_file(matches, parts, guest)


def _candidates_linux(parts: list[str], guest: GuestPath) -> list[str]:
    segs = guest.segments
    out = []
    for part in parts:
        for k in range(len(segs)):  # k segments form the partition's mount point
            out.append(f"{part}/{'/'.join(segs[k:])}")
    return out


def _linux(browser: _Browser, parts: list[str], guest: GuestPath) -> list[Match]:
    found = []
    for candidate in _candidates_linux(parts, guest):
        item = browser.lookup(candidate, case_insensitive=False)
        if item is not None:
            found.append(Match(candidate, item))
    return found


def _spelled(candidate: str, item: BrowseItem) -> str:
    """The path as the ZVM spells it (NTFS matched case-insensitively), when it gives one."""
    real = item.path.strip("/")
    if real.lower() == candidate.lower():
        return real
    parent = candidate.rpartition("/")[0]
    return f"{parent}/{item.name}"


def _is_system_reserved(browser: _Browser, part: str) -> bool:
    if "reserved" in part.lower():
        return True
    children = browser.listing(part) or {}
    names = {n.lower() for n in children}
    return "bootmgr" in names and "windows" not in names


def _windows(browser: _Browser, parts: list[str], guest: GuestPath) -> list[Match]:
    found = []
    for part in parts:
        if _is_system_reserved(browser, part):
            continue
        candidate = f"{part}/{guest.relative}"
        item = browser.lookup(candidate, case_insensitive=True)
        if item is not None:
            found.append(Match(_spelled(candidate, item), item))
    if len(found) > 1 and guest.drive == "C:":
        system = [m for m in found if "windows" in {n.lower() for n in (browser.listing(m.flr_path.split("/")[0]) or {})}]
        if len(system) == 1:
            return system
    return found


def _is_file(item: BrowseItem) -> bool:
    kind = (item.type or "").lower()
    return kind == "file" or (kind == "" and item.is_downloadable)


def _one_file(matches: list[Match], parts: list[str], guest: GuestPath) -> Match:
    if not matches:
        raise NotFoundError(
            f"{guest.original} does not exist in this checkpoint (looked on partitions: {', '.join(parts) or 'none'})"
        )
    if len(matches) > 1:
        raise ApplicationError(
            f"{guest.original} is ambiguous in this checkpoint; it exists as "
            f"{', '.join(m.flr_path for m in matches)}"
        )
    match = matches[0]
    if not _is_file(match.item):
        raise ApplicationError(f"{guest.original} is a {(match.item.type or 'folder').lower()}, not a file ({match.flr_path})")
    return match
