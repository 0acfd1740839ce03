"""Restore in place: after the pull, show a person the diff, and on their second click guard, write the file back
into the guest, read it back and compare sha256 (docs/restore.md).

Each step is a compare-and-swap on ``restore_state``, so a redelivered task acts once: ``restore_compare`` reads
the file as the guest holds it now; ``recovery_restore_confirm`` takes the click on exactly the diff shown
(``diff_token``); ``recoveries.restore.write_back`` guards, writes, reads back and lets sha256 decide. Nothing is
written into a guest before its guard is ok. A folder takes the same steps file by file under one guard.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AnonymousUser, User
from django.db import IntegrityError, transaction
from django.utils import timezone

from recoveries.models import RecoveryRequest, RecoveryWriteBackConfirmation, RestoreState
from recoveries.restore.announce import restore_announce_awaiting, restore_announce_finished
from recoveries.restore.diff import FileDiff, file_diff
from recoveries.restore.files import (
    FolderFileDiff,
    folder_compare,
    folder_compared_digest,
    folder_diffs,
    folder_refusal,
    read_current,
)
from recoveries.restore.guest_tools import guest_file_tools_for
from recoveries.restore.guestfile import encode_content
from recoveries.restore.models import GuestFileTools
from recoveries.services import _check_approver, _get, asked_by_them
from rewind.audit import SYSTEM, Actor, audit_record
from rewind.audit.actions import RecoveryAction
from rewind.lib.errors import ApplicationError, PermissionDeniedError
from rewind.lib.requestid import current_request_id
from rewind.workers.broker import queue_task

logger = logging.getLogger(__name__)
Status = RecoveryRequest.Status
State = RestoreState
CURRENT_FILE = ".guest-current"
WRITE_BACK_TASK = "recoveries.write_back"
FINAL_STATES = (State.VERIFIED, State.DIFFERS, State.NOT_WRITTEN, State.FAILED)


def restore_change_id(recovery: RecoveryRequest) -> str:
    return f"restore-{recovery.pk}"


def _current_path(recovery: RecoveryRequest) -> Path:
    return Path(settings.REWIND_STORAGE_DIR) / str(recovery.pk) / CURRENT_FILE


def restore_recovered(recovery: RecoveryRequest) -> bytes:
    return Path(recovery.stored_path).read_bytes()


def _current(recovery: RecoveryRequest) -> bytes | None:
    path = _current_path(recovery)
    return path.read_bytes() if recovery.current_sha256 and path.is_file() else None


def diff_token(recovery: RecoveryRequest) -> str:
    """Names the diff a page showed: the write-back click carries it, and only the same diff confirms."""
    if recovery.compared_at is None:
        return ""
    seen = f"{recovery.pk}|{recovery.sha256}|{recovery.current_sha256}|{recovery.current_error}|{recovery.compared_at.isoformat()}"
    return hashlib.sha256(seen.encode()).hexdigest()[:32]


def restore_diff(recovery: RecoveryRequest) -> FileDiff | None:
    """The diff for the approval page; None before the file in the guest was compared, without the bytes, or for a
    folder (``restore_folder_diffs``)."""
    if recovery.recursive or recovery.compared_at is None or not recovery.stored_path or recovery.purged_at is not None:
        return None
    try:
        recovered = restore_recovered(recovery)
    except OSError:
        return None
    if recovery.current_error and not recovery.current_sha256:
        return file_diff(None, recovered, current_name="(not read)", recovered_name="checkpoint")
    name = recovery.path
    return file_diff(_current(recovery), recovered, current_name=f"{name} now", recovered_name=f"{name} at checkpoint")


def restore_folder_diffs(recovery: RecoveryRequest) -> list[FolderFileDiff] | None:
    """A folder's per-file summary for the approval page; None before its files were compared."""
    if not recovery.recursive or recovery.compared_at is None or not recovery.stored_path or recovery.purged_at:
        return None
    try:
        return folder_diffs(recovery)
    except OSError:
        return None


def restore_context(recovery: RecoveryRequest) -> dict[str, Any]:
    """What the review page shows of a restore in place: the diff, its token, and whether to offer the click,
    offered from approval on, so a page loaded before the diff exists carries an empty token that is refused."""
    if not recovery.restore:
        return {}
    open_states = ("", State.COMPARING, State.AWAITING)
    offered = recovery.status in (Status.APPROVED, Status.WAITING, Status.RUNNING, Status.CONFIRM)
    return {
        "diff": restore_diff(recovery),
        "folder_diffs": restore_folder_diffs(recovery),
        "diff_token": diff_token(recovery),
        "restore_open": offered and recovery.restore_state in open_states,
    }


# -- 1. after the pull ---------------------------------------------------------------------------


def _refusal_before_asking(recovery: RecoveryRequest, tools: GuestFileTools | None) -> str | None:
    """Why the file cannot be written back at all, known before any person is asked; None when it can."""
    if tools is None:
        return f"no tool is configured any more to write a file into {recovery.vm_name} ({recovery.os})"
    if recovery.recursive:
        return folder_refusal(recovery, tools)
    limit = settings.REWIND_RESTORE_MAX_BYTES
    if (recovery.size or 0) > limit:
        return f"the file is {recovery.size} bytes, above the in-place limit of {limit} (REWIND_RESTORE_MAX_BYTES)"
    try:
        encode_content(tools, restore_recovered(recovery))
    except ApplicationError as exc:
        return exc.message
    return None


def restore_compare(*, recovery_id: int, request_id: str) -> str:
    """Read the file in the guest now and keep it for the diff; the restore state afterwards. Runs once per
    request. A file that cannot be written back at all (too large, binary for a text writer, no writer left)
    ends the request now, with its bytes and ``restored`` saying why."""
    won = RecoveryRequest.objects.filter(pk=recovery_id, status=Status.CONFIRM, restore_state=State.COMPARING).exists()
    if not won:
        return str(RecoveryRequest.objects.filter(pk=recovery_id).values_list("restore_state", flat=True).first())
    recovery = RecoveryRequest.objects.get(pk=recovery_id)
    tools = guest_file_tools_for(vm_name=recovery.vm_name, os=recovery.os)
    refusal = _refusal_before_asking(recovery, tools)
    if refusal is not None:
        restore_finish(recovery, State.NOT_WRITTEN, f"not written: {refusal}; the recovered bytes are kept", request_id)
        return State.NOT_WRITTEN
    assert tools is not None
    fields = _compared_fields(recovery, tools)
    with transaction.atomic():
        done = RecoveryRequest.objects.filter(pk=recovery_id, restore_state=State.COMPARING).update(
            restore_state=State.AWAITING, compared_at=timezone.now(), **fields
        )
        if done:
            audit_record(
                actor=SYSTEM,
                action=RecoveryAction.RESTORE_COMPARED,
                target=recovery,
                data={
                    "vm": recovery.vm_name,
                    "path": recovery.normalized_path,
                    "recovered_sha256": recovery.sha256,
                    "current_sha256": fields["current_sha256"] or None,
                    "current_size": fields["current_size"],
                    "current_error": fields["current_error"] or None,
                    **_files_audited(fields.get("restore_files")),
                },
                request_id=request_id,
            )
            restore_announce_awaiting(recovery=recovery, request_id=request_id)
    return State.AWAITING


def _compared_fields(recovery: RecoveryRequest, tools: GuestFileTools) -> dict[str, Any]:
    """What the guest holds now, as the request keeps it: the file's bytes beside the recovered ones,
    or a folder's files one by one (``current_sha256`` then pins them all, for the diff token)."""
    if recovery.recursive:
        files = folder_compare(recovery, tools)
        return {
            "restore_files": files,
            "current_sha256": folder_compared_digest(files),
            "current_size": None,
            "current_error": "",
        }
    current, error = read_current(tools, recovery.vm_name, recovery.path)
    fields: dict[str, Any] = {"current_error": error, "current_sha256": "", "current_size": None}
    if current is not None:
        _current_path(recovery).write_bytes(current)
        fields.update(current_sha256=hashlib.sha256(current).hexdigest(), current_size=len(current))
    return fields


def _files_audited(files: list[dict[str, Any]] | None) -> dict[str, Any]:
    """A folder's files in an audit row: each path with what the guest held and, once known, its result."""
    if not files:
        return {}
    keys = ("path", "change", "current_sha256", "result", "message", "read_back_sha256")
    return {"files": [{key: row.get(key) for key in keys} for row in files]}


# -- 2. the second click ---------------------------------------------------------------------------


def recovery_restore_confirm(
    *, recovery_id: int, user: User | AnonymousUser, seen: str, request_id: str | None = None
) -> RecoveryRequest:
    """A person's write-back click on the diff ``seen``. Every click is recorded; the write-back starts once
    ``approvals_required`` distinct people confirmed the same diff (four eyes).

    Refused (``ApplicationError``, nothing changed) before the diff exists, for another diff, when the request
    is not awaiting the click, or for a second click by the same person; ``PermissionDeniedError`` without the
    permission to approve, and for the requesting agent's owner or the person who asked.
    """
    recovery = _get(recovery_id)
    person = _check_approver(user, recovery)
    if (why := asked_by_them(recovery, person)) is not None:
        raise PermissionDeniedError(f"{why}; someone else must confirm the write-back")
    if not recovery.restore:
        raise ApplicationError(f"recovery #{recovery.pk} was not asked to be restored in place")
    if recovery.restore_state != State.AWAITING:
        raise ApplicationError(_not_awaiting(recovery))
    if not seen or seen != diff_token(recovery):
        raise ApplicationError(
            f"recovery #{recovery.pk}: you have not been shown the diff of the file in the guest against the "
            "checkpoint's yet (or not this one): reload the page, read the diff, then click Write back"
        )
    rid = request_id or current_request_id()
    now = timezone.now()
    with transaction.atomic():
        # The lock orders two people's clicks: the second one counts the first.
        locked = RecoveryRequest.objects.select_for_update().get(pk=recovery.pk)
        if locked.restore_state != State.AWAITING:
            raise ApplicationError(_not_awaiting(locked))
        names = _confirmation_record(locked, person, seen)
        required = locked.approvals_required
        complete = len(names) >= required
        if complete:
            won = RecoveryRequest.objects.filter(
                pk=recovery.pk, status=Status.CONFIRM, restore_state=State.AWAITING
            ).update(
                status=Status.RESTORING,
                restore_state=State.GUARDING,
                confirmed_by=", ".join(names)[:150],
                confirmed_at=now,
                restore_step_at=now,
            )
            if not won:
                raise ApplicationError(f"recovery #{recovery.pk} was confirmed meanwhile")
            write_back_queue(recovery.pk, rid)
        audit_record(
            actor=Actor.user(person.get_username()),
            action=RecoveryAction.RESTORE_CONFIRMED,
            target=recovery,
            data={
                "vm": recovery.vm_name,
                "path": recovery.normalized_path,
                "recovered_sha256": recovery.sha256,
                "current_sha256": recovery.current_sha256 or None,
                "diff": seen,
                **({"files": len(recovery.restore_files)} if recovery.recursive else {}),
                "confirmations": len(names),
                "required": required,
                "complete": complete,
            },
            request_id=rid,
        )
    recovery.refresh_from_db()
    return recovery


def _confirmation_record(recovery: RecoveryRequest, person: User, seen: str) -> list[str]:
    """Record ``person``'s click on the diff ``seen``; the names of all who confirmed it, in order. Needs the
    caller's transaction and lock; ``ApplicationError`` when this person already confirmed."""
    again = ApplicationError(
        f"you already confirmed the write-back of recovery #{recovery.pk}; a second person must confirm it"
    )
    if recovery.write_back_confirmations.filter(person_id=person.pk).exists():
        raise again
    try:
        with transaction.atomic():  # a double click that raced past the check meets the unique constraint
            RecoveryWriteBackConfirmation.objects.create(
                recovery=recovery, person=person, person_name=person.get_username(), diff_token=seen
            )
    except IntegrityError:
        raise again from None
    return list(recovery.write_back_confirmations.filter(diff_token=seen).values_list("person_name", flat=True))


def recovery_restore_decline(
    *, recovery_id: int, user: User | AnonymousUser, request_id: str | None = None
) -> RecoveryRequest:
    """A person decides not to write the file back: the request ends with its bytes, nothing written. Only while it
    awaits the click; stopping is always safe, so the agent's owner may too."""
    recovery = _get(recovery_id)
    person = _check_approver(user, recovery)
    if recovery.restore_state != State.AWAITING:
        raise ApplicationError(_not_awaiting(recovery))
    name = person.get_username()
    message = f"not written: {name} decided not to write it back; the recovered bytes are kept"
    rid = request_id or current_request_id()
    ended = restore_finish(recovery, State.NOT_WRITTEN, message, rid, actor=Actor.user(name), from_state=State.AWAITING)
    if not ended:
        raise ApplicationError(f"recovery #{recovery.pk} was decided meanwhile")
    recovery.refresh_from_db()
    return recovery


def _files_left_unwritten(recovery: RecoveryRequest, message: str) -> list[dict[str, Any]]:
    """A folder's files, each one the write-back never reached marked not written with the reason it ended."""
    files = RecoveryRequest.objects.filter(pk=recovery.pk).values_list("restore_files", flat=True).first() or []
    if any(not row["result"] for row in files):
        said = message if message.startswith("not written") else f"not written: {message}"
        files = [row if row["result"] else {**row, "result": State.NOT_WRITTEN, "message": said} for row in files]
        RecoveryRequest.objects.filter(pk=recovery.pk).update(restore_files=files)
    return files


def _not_awaiting(recovery: RecoveryRequest) -> str:
    if recovery.status in (Status.PENDING, Status.APPROVED, Status.WAITING, Status.RUNNING) or (
        recovery.restore_state == State.COMPARING
    ):
        return (
            f"recovery #{recovery.pk}: the diff of the file in the guest against the checkpoint's is not produced "
            "yet (the file is pulled first): reload the page once it shows the diff, read it, then click Write back"
        )
    if recovery.restore_state in FINAL_STATES:
        return f"recovery #{recovery.pk} is over: {recovery.restore_message}"
    return f"recovery #{recovery.pk} is {recovery.status} ({recovery.restore_state or 'not restoring'}); nothing to confirm"


def write_back_queue(recovery_id: int, request_id: str, countdown: float | None = None) -> None:
    """Queue the next write-back step; a queue that refuses leaves it for ``restores_resume_stalled``."""
    queue_task(
        WRITE_BACK_TASK, recovery_id, request_id, countdown=countdown, what=f"the write-back of recovery #{recovery_id}"
    )


def restore_finish(
    recovery: RecoveryRequest,
    state: str,
    message: str,
    request_id: str,
    written: str = "",
    *,
    actor: Actor = SYSTEM,
    from_state: str | None = None,
) -> str:
    """End the restore: the request succeeded (its bytes are here) and ``restored`` says what the guest got.
    Returns ``state``, or "" when another step ended it first (or it was not in ``from_state``)."""
    with transaction.atomic():
        rows = RecoveryRequest.objects.filter(pk=recovery.pk, status__in=(Status.CONFIRM, Status.RESTORING))
        if from_state is not None:
            rows = rows.filter(restore_state=from_state)
        won = rows.exclude(restore_state__in=FINAL_STATES).update(
            status=Status.SUCCEEDED,
            restore_state=state,
            restore_message=message[:4000],
            written_sha256=written,
            finished_at=timezone.now(),
        )
        if won:
            files = _files_left_unwritten(recovery, message)
            audit_record(
                actor=actor,
                action=RecoveryAction.RESTORE_FINISHED,
                target=recovery,
                data={
                    "restored": state,
                    "message": message[:4000],
                    "vm": recovery.vm_name,
                    "path": recovery.normalized_path,
                    "sha256": recovery.sha256,
                    "read_back_sha256": written or None,
                    **_files_audited(files),
                    "guard": RecoveryRequest.objects.filter(pk=recovery.pk)
                    .values_list("restore_guard_id", flat=True)
                    .first(),
                },
                request_id=request_id,
            )
            restore_announce_finished(
                recovery=recovery, state=state, message=message, request_id=request_id, files=files
            )
    if not won:
        return ""
    logger.info("recovery %s: restore in place %s: %s", recovery.pk, state, message)
    return state
