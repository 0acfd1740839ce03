"""What a recovery looks like to the outside: one definition for the MCP tools, the REST API and its schema.

``RecoveryOut`` is what an agent reads (``zerto_recover_file``, ``zerto_recovery_status``);
``RecoveryRecordOut`` adds what only an operator reads, and is the REST body (``recovery_dict``).
Everything a recovery shows is computed here, the links and the inline file included.
"""

from __future__ import annotations

import base64
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

from django.conf import settings
from django.urls import reverse
from pydantic import Field, WithJsonSchema

from recoveries.models import RecoveryRequest, RestoreState
from rewind.checkpoints.presenters import LEAVES_JOURNAL_AT_DOC, LEFT_JOURNAL_SEEN_AT_DOC
from rewind.checkpoints.selectors import journal_state_of
from rewind.lib.rest.outputs import URL, OutputModel, choices, optional, rest_body

# A recovery may name a checkpoint this service did not tag (a bare journal checkpoint): no forecast then.
RECOVERY_LEAVES_JOURNAL_AT_DOC = f"{LEAVES_JOURNAL_AT_DOC}; always null for a checkpoint this service did not tag"
# The agent's answer only: the REST body always links the file.
MCP_ONLY = WithJsonSchema(None, mode="serialization")


def live_sessions_url() -> str:
    """The admin page listing every live FLR session, where a person may end any of them."""
    return settings.REWIND_PUBLIC_URL + reverse("admin:recoveries_flrsession_live")


def approval_url(recovery: RecoveryRequest) -> str:
    """The admin page where a person reviews and approves or denies the request."""
    return settings.REWIND_PUBLIC_URL + reverse("admin:recoveries_recoveryrequest_review", args=[recovery.pk])


def download_url(recovery: RecoveryRequest) -> str:
    """Authenticated download: the requesting agent's bearer token, or a staff session."""
    return settings.REWIND_PUBLIC_URL + reverse("recoveries-api:download", args=[recovery.pk])


def stored_file(r: RecoveryRequest) -> Path | None:
    """The recovered file on this server, while it is kept; None otherwise."""
    if r.status != RecoveryRequest.Status.SUCCEEDED or not r.stored_path or r.purged_at is not None:
        return None
    path = Path(r.stored_path)
    return path if path.is_file() else None


def purged_message(r: RecoveryRequest) -> str:
    return (
        f"the recovered bytes were deleted on {r.purged_at:%Y-%m-%d %H:%M} UTC after the retention period "
        "(REWIND_RECOVERED_RETENTION_DAYS); sha256 and size still say what they were"
    )


def waiting_message(r: RecoveryRequest) -> str:
    """What a person or an agent reads about a request waiting for its recovery site."""
    since = r.site_unavailable_since
    text = f"waiting for site {r.recovery_site_name or r.recovery_site_identifier}, unavailable " + (
        f"since {since:%Y-%m-%d %H:%M:%S} UTC" if since else "lately"
    )
    if r.site_unavailable_reason:
        text += f" ({r.site_unavailable_reason})"
    if r.resume_queued_at is not None:
        return text + "; it answers again and the run is queued"
    return text + (
        f"; the run starts again when it answers, until the request expires at {r.expires_at:%Y-%m-%d %H:%M:%S} UTC"
    )


class CheckpointOut(OutputModel):
    rest_name = "RecoveryCheckpoint"

    identifier: str
    timestamp: datetime | None
    tag: str
    change_id: str
    source: Annotated[str, choices(RecoveryRequest.CheckpointSource.choices)] = Field(
        description="change_id | tag | checkpoint_id | latest_tagged (the default) | before_call | point_in_time"
    )
    vpg_identifier: str
    vpg_name: str
    recovery_site: str
    listed_late_at: datetime | None = Field(
        default=None,
        description="Set when Zerto listed this checkpoint only after its guard had timed out (the guard "
        "said not to proceed); the checkpoint is still a valid point to recover from",
    )
    leaves_journal_at: datetime | None = Field(default=None, description=RECOVERY_LEAVES_JOURNAL_AT_DOC)
    left_journal_seen_at: datetime | None = Field(default=None, description=LEFT_JOURNAL_SEEN_AT_DOC)
    before_call: str | None = Field(
        default=None, description="An undo: the gateway call this checkpoint was chosen before"
    )
    before: datetime | None = Field(
        default=None,
        description="An undo: the moment undone (the call's start, or point_in_time), UTC on this service's clock",
    )
    before_by_s: float | None = Field(
        default=None, description="An undo: how many seconds before that moment the chosen checkpoint was taken"
    )


class UnmountOut(OutputModel):
    rest_name = "RecoveryUnmount"

    ok: bool
    session_id: str
    warning: str | None = optional()


class ManifestEntryOut(OutputModel):
    rest_name = "RecoveryManifestEntry"

    path: str = Field(description="Below the folder, '/'-separated; the archive's member of the same name")
    size: int
    sha256: str
    modified: datetime | None = Field(default=None, description="The ZVM's LastWriteTime, when it gives one")


class SkippedOut(OutputModel):
    rest_name = "RecoverySkippedEntry"

    path: str
    reason: str


class FolderOut(OutputModel):
    rest_name = "RecoveryFolder"

    files: int = Field(description="How many files came back")
    bytes: int = Field(description="Their bytes in all (the archive's size is result.size)")
    manifest: list[ManifestEntryOut] = Field(description="Every file, in the order walked (breadth-first)")
    skipped: list[SkippedOut] = Field(description="Entries listed that could not be brought back (e.g. links)")


class ResultOut(OutputModel):
    rest_name = "RecoveryResult"

    ok: bool
    sha256: str | None = Field(default=None, description="Of the file; of the zip archive for a folder")
    size: int | None = Field(default=None, description="Of the file; of the zip archive for a folder")
    content: Annotated[str | None, MCP_ONLY] = optional(
        description="The file, when small enough: text, or base64 (see encoding)"
    )
    encoding: Annotated[str | None, MCP_ONLY] = optional(description="utf-8 or base64")
    url: Annotated[str | None, URL] = optional(description="For larger files: GET it with your bearer token")
    error: str | None = optional()
    restored: str | None = optional(
        description='A restore in place: "verified", or what differs, or why it was not (fully) written'
    )
    unmount: UnmountOut | None = None
    folder: FolderOut | None = optional(description="A folder (recursive): what came back; url downloads the zip of it")
    purged_at: datetime | None = optional(
        description="Set once the retention period deleted the recovered bytes (error says so)"
    )


class RestoreFileOut(OutputModel):
    rest_name = "RecoveryRestoreFile"

    path: str = Field(description="Below the folder, /-separated (as in the manifest)")
    change: str = Field(
        description="What the write-back would do: unchanged (skipped), changed, or new (the guest has no such "
        "file now, or it could not be read: see current_error)"
    )
    current_sha256: str | None = Field(default=None, description="The file in the guest before the write-back")
    current_size: int | None = None
    current_error: str | None = None
    result: str | None = Field(
        default=None, description="Once decided: verified, differs, failed, not_written, or skipped (unchanged)"
    )
    restored: str | None = Field(default=None, description='"verified", or what differs, or why it was not written')
    read_back_sha256: str | None = None


class WriteBackConfirmationOut(OutputModel):
    rest_name = "RecoveryWriteBackConfirmation"

    person: str
    at: datetime


class RestoreOut(OutputModel):
    rest_name = "RecoveryRestore"

    state: Annotated[str, choices(RestoreState.choices)] = Field(
        description="requested (not pulled yet), comparing, awaiting (a person must confirm the write-back after "
        "seeing the diff), guarding, writing, verified, differs, not_written or failed"
    )
    restored: str | None = Field(
        default=None, description='Once over: "verified", or what differs, or why it was not (fully) written'
    )
    current_sha256: str | None = Field(default=None, description="The file in the guest before the write-back")
    current_size: int | None = None
    current_error: str | None = Field(default=None, description="Why the file in the guest could not be read")
    confirmed_by: str | None = None
    confirmations: list[WriteBackConfirmationOut] = Field(
        default_factory=list, description="Who clicked Write back after reading the diff, in order"
    )
    confirmations_required: int = Field(
        default=1,
        description="How many distinct people must confirm the write-back before anything is written: 2 when "
        "a second approver is required, else 1",
    )
    read_back_sha256: str | None = Field(default=None, description="What the reader gave back after the write")
    guard_id: int | None = Field(default=None, description="The guard taken before the write-back")
    change_id: str | None = Field(
        default=None, description="Its change id: zerto_recover_file with it undoes the write-back"
    )
    files: list[RestoreFileOut] | None = optional(
        description="A folder (recursive): each file's comparison and, once written, its own verification; "
        "restored is verified only when every file written is",
    )


def restore_out(r: RecoveryRequest) -> RestoreOut | None:
    if not r.restore:
        return None
    over = r.restore_state in (
        RestoreState.VERIFIED,
        RestoreState.DIFFERS,
        RestoreState.NOT_WRITTEN,
        RestoreState.FAILED,
    )
    out = RestoreOut(
        state=r.restore_state or "requested",
        restored=r.restore_message or None if over else None,
        current_sha256=r.current_sha256 or None,
        current_size=r.current_size,
        current_error=r.current_error or None,
        confirmed_by=r.confirmed_by or None,
        confirmations=[
            WriteBackConfirmationOut(person=c.person_name, at=c.at) for c in r.write_back_confirmations.all()
        ],
        confirmations_required=r.approvals_required,
        read_back_sha256=r.written_sha256 or None,
        guard_id=r.restore_guard_id,
        change_id=f"restore-{r.pk}" if r.restore_guard_id else None,
    )
    if r.recursive:
        out.files = [_restore_file_out(row) for row in r.restore_files]
    return out


def _restore_file_out(row: dict[str, Any]) -> RestoreFileOut:
    return RestoreFileOut(
        path=row["path"],
        change=row["change"],
        current_sha256=row.get("current_sha256") or None,
        current_size=row.get("current_size"),
        current_error=row.get("current_error") or None,
        result=row.get("result") or None,
        restored=row.get("message") or None,
        read_back_sha256=row.get("read_back_sha256") or None,
    )


class WaitingOut(OutputModel):
    rest_name = "RecoveryWaiting"

    site: str = Field(description="The recovery site the run waits for")
    unavailable_since: datetime | None = Field(description="Since when that site's ZVM has not answered (UTC)")
    reason: str = Field(description="Its last failure")
    message: str = Field(description="The same in one sentence")


# A recovery as its agent reads it (no docstring: it would be the tool's output description).
class RecoveryOut(OutputModel):
    id: int
    status: Annotated[str, choices(RecoveryRequest.Status.choices)] = Field(
        description="pending, approved, waiting (approved, but its recovery site is unavailable: see "
        "waiting_for_site), denied, expired, running, succeeded or failed"
    )
    vm: str
    vm_identifier: str
    path: str = Field(description="The guest path as it was asked for")
    recursive: bool = Field(default=False, description="true: path is a folder, brought back with all it holds")
    checkpoint: CheckpointOut
    approval_url: Annotated[str, URL] = Field(description="Where a human reviews and approves or denies this request")
    approvals_required: int
    expires_at: datetime
    error: str = ""
    waiting_for_site: WaitingOut | None = Field(
        default=None,
        description="Set while waiting: the run starts again by itself when the site answers, until the request "
        "expires; nothing to do but poll",
    )
    result: ResultOut | None = Field(default=None, description="Set once the run ended (succeeded or failed)")
    restore: RestoreOut | None = Field(
        default=None, description="Set when the file was asked to be written back into the guest (restore: true)"
    )


class ApprovalOut(OutputModel):
    rest_name = "RecoveryApprovalEntry"

    approver: str
    at: datetime


class RecoveryRecordOut(RecoveryOut):
    """A recovery as an operator reads it (REST): its agent's view, and who asked, why, who decided, when."""

    rest_name = "Recovery"

    agent: str = Field(description="The agent that asked; empty when a person asked")
    requested_by: str = Field(description="The person who asked (REST or the admin); empty when an agent asked")
    normalized_path: str
    reason: str
    approvals: list[ApprovalOut]
    decided_by: str
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    request_id: str


class RecoveryListOut(OutputModel):
    results: list[RecoveryRecordOut]


def checkpoint_out(r: RecoveryRequest) -> CheckpointOut:
    journal = journal_state_of(r)
    return CheckpointOut.of(
        r,
        identifier=r.checkpoint_identifier,
        timestamp=r.checkpoint_timestamp,
        tag=r.checkpoint_tag,
        source=r.checkpoint_source,
        recovery_site=r.recovery_site_name or r.recovery_site_identifier,
        listed_late_at=r.checkpoint_listed_late_at,
        # The retention forecast of our tagged checkpoint (none for a bare journal checkpoint id).
        leaves_journal_at=journal.leaves_at,
        left_journal_seen_at=journal.left_seen_at,
        before_call=r.undo_call_id or None,
        before=r.undo_before,
        before_by_s=r.undo_before_by_s,
    )


def unmount_out(r: RecoveryRequest) -> UnmountOut | None:
    if r.unmount_ok is None and not r.unmount_session_id:
        return None
    out = UnmountOut(ok=bool(r.unmount_ok), session_id=r.unmount_session_id)
    if r.unmount_warning:
        out.warning = r.unmount_warning
    return out


def result_out(r: RecoveryRequest, *, inline: bool = True) -> ResultOut | None:
    """``{ok, content|url, sha256, size, unmount}`` once the run ended, only the keys that apply set: a
    small file inline (text if UTF-8, else base64), ``purged_at`` and ``error`` once the bytes are deleted."""
    if r.status not in (RecoveryRequest.Status.SUCCEEDED, RecoveryRequest.Status.FAILED):
        return None
    out = ResultOut(ok=bool(r.ok), sha256=r.sha256 or None, size=r.size, unmount=unmount_out(r))
    if r.restore and r.restore_message:
        out.restored = r.restore_message
    if r.status == RecoveryRequest.Status.FAILED:
        out.error = r.error
        return out
    if r.purged_at is not None:
        out.purged_at, out.error = r.purged_at, purged_message(r)
        return out
    path = stored_file(r)
    if path is None:
        out.error = "the recovered file is no longer kept on this server"
        return out
    if r.recursive:
        out.folder, out.url = folder_out(r), download_url(r)  # a folder is never inline: its zip is a link
    elif inline and (r.size or 0) <= settings.REWIND_INLINE_MAX_BYTES:
        data = path.read_bytes()
        try:
            out.content, out.encoding = data.decode("utf-8"), "utf-8"
        except UnicodeDecodeError:
            out.content, out.encoding = base64.b64encode(data).decode("ascii"), "base64"
    else:
        out.url = download_url(r)
    return out


def folder_out(r: RecoveryRequest) -> FolderOut:
    manifest = [ManifestEntryOut.model_validate(entry) for entry in r.manifest]
    return FolderOut(
        files=len(manifest),
        bytes=sum(e.size for e in manifest),
        manifest=manifest,
        skipped=[SkippedOut.model_validate(entry) for entry in r.manifest_skipped],
    )


def folder_summary(r: RecoveryRequest) -> str:
    """What a person reads about a folder request: its figures once known, else the limits it runs under."""
    if r.manifest:
        files, size = len(r.manifest), sum(int(e["size"]) for e in r.manifest)
        return f"a folder: {files} files, {size} bytes"
    return (
        f"a folder, with every file under it (up to {settings.REWIND_FOLDER_MAX_FILES} files and "
        f"{settings.REWIND_FOLDER_MAX_BYTES} bytes; how many is known once it is mounted)"
    )


def result_dict(r: RecoveryRequest, *, inline: bool = True) -> dict[str, Any] | None:
    """``result_out`` as JSON, its unset keys left out (the admin's review page reads it)."""
    out = result_out(r, inline=inline)
    return rest_body(out) if out is not None else None


def waiting_out(r: RecoveryRequest) -> WaitingOut | None:
    """``{site, unavailable_since, reason, message}`` while the request waits for its recovery site, else None."""
    if r.status != RecoveryRequest.Status.WAITING:
        return None
    return WaitingOut(
        site=r.recovery_site_name or r.recovery_site_identifier,
        unavailable_since=r.site_unavailable_since,
        reason=r.site_unavailable_reason,
        message=waiting_message(r),
    )


def recovery_record_out(r: RecoveryRequest, *, inline: bool = False) -> RecoveryRecordOut:
    """Everything a recovery shows; ``inline``: a small recovered file comes in the answer."""
    return RecoveryRecordOut.of(
        r,
        agent=r.agent_name,
        requested_by=r.requested_by_name,
        vm=r.vm_name,
        checkpoint=checkpoint_out(r),
        approvals=[ApprovalOut(approver=a.approver_name, at=a.created_at) for a in r.approvals.all()],
        waiting_for_site=waiting_out(r),
        approval_url=approval_url(r),
        result=result_out(r, inline=inline),
        restore=restore_out(r),
    )


def recovery_dict(r: RecoveryRequest, *, inline: bool = False) -> dict[str, Any]:
    """The REST body of a recovery: ``recovery_record_out`` as JSON, unset keys left out."""
    return rest_body(recovery_record_out(r, inline=inline))


def recovery_agent_out(r: RecoveryRequest) -> RecoveryOut:
    """A recovery as its agent reads it, a small recovered file inline."""
    full = recovery_record_out(r, inline=True)
    return RecoveryOut.model_validate({name: getattr(full, name) for name in RecoveryOut.model_fields})
