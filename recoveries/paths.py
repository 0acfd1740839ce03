"""Guest paths: what an agent may ask for, checked before anything is recorded.

A Linux path is absolute with ``/``; a Windows path starts with a drive letter (``/`` also accepted). Relative
paths, ``.``/``..`` segments, control and format characters, a Linux backslash and a folder or drive root are
refused with a plain reason.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from rewind.lib.errors import ApplicationError

MAX_PATH_LENGTH = 1024
_DRIVE = re.compile(r"^([A-Za-z]):([\\/]|$)")
# Control, format and separator characters: a NUL or a line break is never part of a path, and a
# bidirectional override (U+202E) or a zero-width character would show the approver a path other
# than the one asked for.
_NEVER_IN_A_PATH = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
_WINDOWS_FORBIDDEN = re.compile(r'[<>:"|?*]')


class GuestPathError(ApplicationError):
    pass


@dataclass(frozen=True)
class GuestPath:
    """A checked guest path. ``segments`` never contain '', '.' or '..'."""

    original: str
    os: str  # "linux" | "windows"
    drive: str | None  # "C:" for Windows
    segments: tuple[str, ...]

    @property
    def normalized(self) -> str:
        """``/etc/hostname`` or ``C:/inetpub/web.config``: one spelling per file."""
        if self.drive:
            return f"{self.drive}/{'/'.join(self.segments)}"
        return "/" + "/".join(self.segments)

    @property
    def relative(self) -> str:
        """The path below its root (drive or ``/``), with ``/`` separators."""
        return "/".join(self.segments)

    @property
    def name(self) -> str:
        return self.segments[-1]


def parse_guest_path(raw: object, *, folder: bool = False) -> GuestPath:
    """Check ``raw`` and return it parsed; raises ``GuestPathError`` naming the problem. ``folder``: the path names
    a folder (a recursive recovery), so a trailing separator is fine."""
    if not isinstance(raw, str) or not raw.strip():
        raise GuestPathError("the path is empty; give the file's absolute guest path, e.g. /etc/hostname")
    path = raw.strip()
    if len(path) > MAX_PATH_LENGTH:
        raise GuestPathError(f"the path is longer than {MAX_PATH_LENGTH} characters")
    if any(unicodedata.category(ch) in _NEVER_IN_A_PATH for ch in path):
        raise GuestPathError(
            "the path contains control or format characters (a NUL, a line break, a direction override)"
        )
    drive = _DRIVE.match(path)
    if drive:
        return _windows(raw, path, f"{drive.group(1).upper()}:", folder)
    if path.startswith("\\\\"):
        raise GuestPathError(f"{path!r} is a network (UNC) path; give a path on the VM's own disks, e.g. C:\\dir\\file")
    if not path.startswith("/"):
        raise GuestPathError(
            f"{path!r} is a relative path; give the absolute guest path (/etc/hostname or C:\\dir\\file)"
        )
    if "\\" in path:
        raise GuestPathError(f"{path!r} mixes backslashes into a Linux path; Linux paths use / only")
    return GuestPath(raw, "linux", None, _segments(path, path.split("/"), folder))


def _windows(raw: str, path: str, drive: str, folder: bool) -> GuestPath:
    rest = path[2:]
    parts = re.split(r"[\\/]", rest)
    segments = _segments(path, parts, folder)
    for seg in segments:
        if _WINDOWS_FORBIDDEN.search(seg):
            raise GuestPathError(f"{path!r} contains a character Windows does not allow in a file name")
    return GuestPath(raw, "windows", drive, segments)


def _segments(path: str, parts: list[str], folder: bool = False) -> tuple[str, ...]:
    if not folder and parts and parts[-1] == "" and len([p for p in parts if p]) > 0:
        raise GuestPathError(
            f"{path!r} ends with a separator, so it names a folder; give a file, or ask with recursive=true for the whole folder"
        )
    segments = [p for p in parts if p != ""]
    if any(seg in ("..", ".") for seg in segments):
        raise GuestPathError(f"{path!r} contains '.' or '..' segments; give the plain absolute path")
    if not segments:
        raise GuestPathError(f"{path!r} names the root, not a {'folder under it' if folder else 'file'}")
    return tuple(segments)
