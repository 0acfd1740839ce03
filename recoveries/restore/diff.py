"""How the file in the guest now differs from what the checkpoint gives back, for the approver: a unified diff for
text (both sides UTF-8, no NUL), sizes and sha256 for anything else.
"""

from __future__ import annotations

import difflib
import hashlib
from dataclasses import dataclass, field

# A page shows this many diff lines at most; the rest is counted, not shown.
MAX_LINES = 2000
# Larger files get sizes and sha256 only: a line diff of megabytes would hold up the page.
MAX_DIFF_BYTES = 1024 * 1024


@dataclass(frozen=True)
class DiffLine:
    kind: str  # "head", "hunk", "removed", "added" or "same"
    text: str


@dataclass
class FileDiff:
    current_size: int | None
    current_sha256: str
    recovered_size: int
    recovered_sha256: str
    text: bool
    lines: list[DiffLine] = field(default_factory=list)
    hidden_lines: int = 0

    @property
    def identical(self) -> bool:
        return self.current_sha256 == self.recovered_sha256

    @property
    def changed_lines(self) -> int:
        return sum(1 for line in self.lines if line.kind in ("removed", "added"))


def _as_text(data: bytes) -> str | None:
    if b"\x00" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _kind(line: str) -> str:
    if line.startswith(("---", "+++")):
        return "head"
    if line.startswith("@@"):
        return "hunk"
    return {"-": "removed", "+": "added"}.get(line[:1], "same")


def file_diff(current: bytes | None, recovered: bytes, *, current_name: str, recovered_name: str) -> FileDiff:
    """The diff from ``current`` (None: there is no file in the guest) to ``recovered``."""
    out = FileDiff(
        current_size=None if current is None else len(current),
        current_sha256="" if current is None else hashlib.sha256(current).hexdigest(),
        recovered_size=len(recovered),
        recovered_sha256=hashlib.sha256(recovered).hexdigest(),
        text=False,
    )
    if max(len(recovered), len(current or b"")) > MAX_DIFF_BYTES:
        return out
    new = _as_text(recovered)
    old = "" if current is None else _as_text(current)
    if new is None or old is None:
        return out
    out.text = True
    diff = difflib.unified_diff(
        old.splitlines(keepends=True), new.splitlines(keepends=True), current_name, recovered_name
    )
    for number, line in enumerate(diff):
        if number >= MAX_LINES:
            out.hidden_lines += 1
            continue
        out.lines.append(DiffLine(_kind(line), line.rstrip("\r\n")))
    return out
