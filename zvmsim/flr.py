"""FLR sessions and prepared downloads of one simulated ZVM."""

from __future__ import annotations

from dataclasses import dataclass, field

from .guestfs import FileNode, FsView

MOUNTING = "MountInProgress"
MOUNTED = "MountCompletedSuccessfully"
FAILED = "MountFailed"
UNMOUNTING = "UnmountInProgress"
UNMOUNTED = "Unmounted"  # shown only by ZVMs that keep listing unmounted sessions (a variant)


@dataclass
class FlrSession:
    identifier: str
    site: str
    vm_id: str
    vpg_id: str
    checkpoint_id: str
    view: FsView
    mount_time: float
    ready_at: float
    fails: bool = False
    initial_path: str | None = None
    foreign: bool = False  # opened through /_sim as another operator
    unmount_at: float | None = None
    unmount_task: str | None = None

    def status(self, now: float) -> str:
        if self.unmount_at is not None:
            return UNMOUNTING if now < self.unmount_at else UNMOUNTED
        if now < self.ready_at:
            return MOUNTING
        return FAILED if self.fails else MOUNTED

    def gone(self, now: float, linger: float = 0.0) -> bool:
        """Unmounted, and no longer listed (``linger`` seconds after the unmount ended)."""
        return self.unmount_at is not None and now >= self.unmount_at + linger


@dataclass
class Download:
    identifier: str
    site: str
    session_id: str
    files: list[tuple[str, FileNode]]  # (name inside a zip, node)
    zipped: bool
    ready_at: float = 0.0  # before then the link answers "not ready"


@dataclass
class FlrState:
    """Per site: its sessions (insertion order) and the download links it handed out."""

    sessions: dict[str, FlrSession] = field(default_factory=dict)
    downloads: dict[str, Download] = field(default_factory=dict)

    def prune(self, now: float, linger: float = 0.0) -> None:
        for sid in [s.identifier for s in self.sessions.values() if s.gone(now, linger)]:
            self.drop(sid)

    def drop(self, session_id: str) -> None:
        self.sessions.pop(session_id, None)
        for did in [d.identifier for d in self.downloads.values() if d.session_id == session_id]:
            del self.downloads[did]

    def clear(self) -> None:
        self.sessions.clear()
        self.downloads.clear()
