"""What a restore in place shows over REST: the diff a person reads before the write-back click, and
which upstream tools write and read guest files."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import AliasPath, Field, RootModel

from recoveries.models import RecoveryRequest
from recoveries.restore.diff import FileDiff
from recoveries.restore.files import UNCHANGED, FolderFileDiff
from recoveries.restore.models import GuestFileTools
from recoveries.restore.services import diff_token
from rewind.lib.rest.outputs import OutputModel, optional


class RecoveryDiffOut(OutputModel):
    diff: str = Field(description="Give it to write-back: it names the diff you were shown.")
    text: bool
    identical: bool
    current_size: int | None
    current_sha256: str
    current_error: str
    recovered_size: int
    recovered_sha256: str
    unified_diff: str
    hidden_lines: int
    files: list[dict[str, Any]] | None = optional(
        description="A folder: per file its path, change (unchanged, changed or new), sizes, sha256 and "
        "unified_diff (empty for unchanged or binary files, or once the page's line budget is spent)."
    )


def diff_out(recovery: RecoveryRequest, diff: FileDiff) -> RecoveryDiffOut:
    """The file in the guest now against the checkpoint's, named for the write-back (``diff_token``)."""
    lines = "\n".join(line.text for line in diff.lines)
    return RecoveryDiffOut.of(diff, diff=diff_token(recovery), current_error=recovery.current_error, unified_diff=lines)


def folder_diff_out(recovery: RecoveryRequest, files: list[FolderFileDiff]) -> RecoveryDiffOut:
    """A folder's files against the checkpoint's, each on its own, the recovered zip's figures overall."""
    shown = [_folder_file(file) for file in files]
    assert recovery.size is not None  # its zip is stored: the folder has a diff
    out = RecoveryDiffOut(
        diff=diff_token(recovery),
        text=False,
        identical=all(file.change == UNCHANGED for file in files),
        current_size=None,
        current_sha256=recovery.current_sha256,
        current_error=recovery.current_error,
        recovered_size=recovery.size,
        recovered_sha256=recovery.sha256,
        unified_diff="\n".join(file["unified_diff"] for file in shown if file["unified_diff"]),
        hidden_lines=sum(file.diff.hidden_lines for file in files if file.diff is not None),
    )
    out.files = shown
    return out


def _folder_file(file: FolderFileDiff) -> dict[str, Any]:
    text = file.diff is not None and file.diff.text
    lines = file.diff.lines if file.diff is not None and text else []
    figures = {name: value for name, value in vars(file).items() if name != "diff"}
    return {**figures, "text": text, "unified_diff": "\n".join(line.text for line in lines)}


class GuestFileToolsOut(OutputModel):
    presents = GuestFileTools

    id: int
    upstream: str = Field(validation_alias=AliasPath("upstream", "name"))
    os: str
    vm_pattern: str
    writer_tool: str
    reader_tool: str
    vm_arg: str
    path_arg: str
    content_arg: str
    reader_vm_arg: str
    reader_path_arg: str
    content_encoding: str
    encoding_arg: str
    enabled: bool
    updated_at: datetime


class GuestFileToolsListOut(RootModel[list[GuestFileToolsOut]]):
    pass
