"""The FLR runner: mount the approved checkpoint at the recovery site, fetch one file, unmount.

No transaction is held across a ZVM call: each step records its attempt, makes the call, then records the
outcome. Before the mount the VM's live sessions are snapshotted and an ``FlrSession`` row committed, so a mount
whose answer is lost can still be found and unmounted. ``ok`` stays true when the bytes landed even if the
unmount then failed; the report says so.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, cast

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from recoveries.archive import StorageFailed
from recoveries.flr_sessions import (
    UnmountReport,
    find_unknown_session,
    session_lookup,
    session_mark_vanished,
    session_transition,
    session_unmount,
)
from recoveries.folders import Fetched, Session, folder_recover
from recoveries.journal import journal_gone_reason
from recoveries.mapping import Match, SessionVanished, map_guest_path
from recoveries.models import FlrSession, RecoveryRequest, RestoreState
from recoveries.paths import parse_guest_path
from recoveries.resolve import checkpoint_window
from recoveries.site_wait import recovery_run_claim, recovery_should_wait, recovery_wait_for_site
from rewind.audit import SYSTEM, audit_record
from rewind.audit.actions import RecoveryAction
from rewind.lib.errors import ApplicationError
from rewind.sites import site_client
from rewind.sites.models import Site
from rewind.zvm import DownloadResult, ZvmClient, ZvmError, ZvmNotFoundError, ZvmRejectedError

logger = logging.getLogger(__name__)
Status = RecoveryRequest.Status
S = FlrSession.Status
MAX_ATTEMPTS = 2  # one more mount when the ZVM dropped the session mid-run (restart)
UNMOUNT_WAIT_S = 20.0


class RunFailed(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass
class Run:
    recovery: RecoveryRequest
    site: Site
    client: ZvmClient
    deadline: float  # monotonic
    request_id: str


def recovery_run(*, recovery_id: int, request_id: str) -> str:
    """Run an approved (or waiting) recovery once; its status afterwards. Harmless to repeat: only the call that
    moves it to running acts. A recovery site found unavailable before anything was mounted makes the request
    wait for it (``site_wait``) instead of failing: no worker waits for a dead ZVM."""
    recovery = recovery_run_claim(recovery_id=recovery_id, request_id=request_id)
    if recovery is None:
        current = RecoveryRequest.objects.filter(pk=recovery_id).values_list("status", flat=True).first()
        logger.info("recovery %s is %s; nothing to run", recovery_id, current)
        return str(current)
    run: Run | None = None
    try:
        run = _prepare(recovery, request_id)
        _execute(run)
    except (RunFailed, ApplicationError, ZvmError) as exc:
        if run is not None and recovery_should_wait(recovery=recovery, site=run.site, error=exc):
            recovery_wait_for_site(recovery=recovery, site=run.site, request_id=request_id)
        else:
            _finish_failed(recovery, _said(exc), request_id)
    except Exception as exc:  # the request must not stay "running" for an unforeseen bug
        logger.exception("recovery %s failed unexpectedly", recovery_id)
        _finish_failed(recovery, f"internal error ({type(exc).__name__}); see the service log", request_id)
    recovery.refresh_from_db()
    return recovery.status


def _said(exc: RunFailed | ApplicationError | ZvmError) -> str:
    return str(exc) if isinstance(exc, ZvmError) else exc.message


def _prepare(recovery: RecoveryRequest, request_id: str) -> Run:
    site = Site.objects.filter(identifier=recovery.recovery_site_identifier, enabled=True).first()
    if site is None:
        name = recovery.recovery_site_name or recovery.recovery_site_identifier
        raise RunFailed(
            f"no ZVM is configured (and enabled) here for site {name}, the recovery site of VPG {recovery.vpg_name}"
        )
    client = site_client(site, request_id=request_id)
    deadline = time.monotonic() + settings.REWIND_FLR_TIME_LIMIT_S
    return Run(recovery, site, client, deadline, request_id)


def _check_mountable(run: Run) -> None:
    """The checkpoint still exists (a resync wipes them) and FLR may mount it."""
    r = run.recovery
    # The window around the checkpoint keeps both lists short (journals hold days of them).
    start, end = checkpoint_window(r.checkpoint_timestamp) if r.checkpoint_timestamp is not None else (None, None)
    if r.checkpoint_timestamp is not None:
        listed = run.client.list_checkpoints(r.vpg_identifier, start=start, end=end)
        if not any(cp.identifier == r.checkpoint_identifier for cp in listed):
            raise RunFailed(
                journal_gone_reason(run.client, r, run.site)
                or f"checkpoint {r.checkpoint_identifier} of VPG {r.vpg_name} no longer exists on {run.site.name} "
                "(a resync wipes every checkpoint, and the journal drops those older than its history)"
            )
    rows = [v for v in run.client.list_vms(vm_identifier=r.vm_identifier) if v.vpg_identifier == r.vpg_identifier]
    if rows and rows[0].is_flr_enabled is False:
        raise RunFailed(f"{run.site.name} does not allow file level recovery of {r.vm_name} in VPG {r.vpg_name} now")
    points = run.client.points_in_time(r.vm_identifier, vpg_id=r.vpg_identifier, start=start, end=end)
    point = next((p for p in points if p.checkpoint and p.checkpoint.identifier == r.checkpoint_identifier), None)
    if point is None:
        raise RunFailed(
            f"checkpoint {r.checkpoint_identifier} is not offered for {r.vm_name} on {run.site.name} any more"
        )
    if point.can_mount is False:
        raise RunFailed(
            f"{run.site.name} will not mount checkpoint {r.checkpoint_identifier}: {point.can_mount_reason or 'no reason given'}"
        )


def _storage_failed(exc: OSError, *, mounted: bool) -> RunFailed:
    """The recovered-files folder did not take the file: said plainly, for the agent and the approver."""
    what = exc.strerror or type(exc).__name__
    after = "the mount was ended and nothing was kept" if mounted else "nothing was mounted"
    return RunFailed(
        f"the recovered-files folder (REWIND_STORAGE_DIR) could not take the file: {what}; {after}. "
        "Once an operator has made room (or made it writable), ask for the file again"
    )


def _check_storage(run: Run) -> None:
    """The recovered-files folder takes a file now, checked before anything is mounted: a full or read-only folder
    would otherwise cost a mount, and the ZVM the download, for nothing."""
    folder = Path(settings.REWIND_STORAGE_DIR) / str(run.recovery.pk)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".{uuid.uuid4().hex}.probe"
        probe.write_bytes(b"\0")
        probe.unlink()
    except OSError as exc:
        logger.error("recovery %s: %s cannot take a file: %s", run.recovery.pk, folder, exc)
        raise _storage_failed(exc, mounted=False) from exc


def _execute(run: Run) -> None:
    guest = parse_guest_path(run.recovery.path, folder=run.recovery.recursive)
    _check_storage(run)
    _check_mountable(run)
    for attempt in range(1, MAX_ATTEMPTS + 1):
        row = _mount(run, attempt)
        try:
            _wait_mounted(run, row)
            match = map_guest_path(
                run.client, row.session_id, guest, vm_identifier=row.vm_identifier, recursive=run.recovery.recursive
            )
            stored, result, fetched = _fetch(run, row, match)
        except SessionVanished:
            _vanished(row, "the ZVM dropped the session during the recovery (restart?)")
            if attempt < MAX_ATTEMPTS:
                continue
            raise RunFailed(f"{run.site.name} dropped the FLR session twice; try again later") from None
        except Exception:  # whatever went wrong, the mount must not outlive the run
            report = _unmount(run, row)
            _store_unmount(run.recovery, report)
            raise
        report = _unmount(run, row)
        _finish_succeeded(run, stored, result, match, report, fetched)
        return


def _fetch(run: Run, row: FlrSession, match: Match) -> tuple[Path, DownloadResult, Fetched | None]:
    """The file, or (a recursive recovery) the folder's archive with its manifest."""
    if not run.recovery.recursive:
        stored, result = _download(run, row, match)
        return stored, result, None
    folder = Path(settings.REWIND_STORAGE_DIR) / str(run.recovery.pk)
    session = Session(run.client, row.session_id, row.vm_identifier)
    try:
        fetched = folder_recover(session, match, recovery=run.recovery, dest=folder, request_id=run.request_id)
    except StorageFailed as exc:
        logger.error("recovery %s: %s did not take the folder's archive: %s", run.recovery.pk, folder, exc)
        raise _storage_failed(exc.oserror, mounted=True) from exc
    return fetched.archive, DownloadResult(fetched.size, fetched.sha256, zipped=True), fetched


def _live_session_ids(run: Run) -> list[str]:
    try:
        return [s.identifier for s in run.client.list_flr_sessions(vm_id=run.recovery.vm_identifier) if s.identifier]
    except ZvmError as exc:
        raise RunFailed(f"could not list the live FLR sessions before mounting: {exc}") from exc


def _mount(run: Run, attempt: int) -> FlrSession:
    r = run.recovery
    snapshot = _live_session_ids(run)
    with transaction.atomic():
        row = FlrSession.objects.create(
            site=run.site,
            recovery=r,
            vm_identifier=r.vm_identifier,
            vpg_identifier=r.vpg_identifier,
            checkpoint_identifier=r.checkpoint_identifier,
            snapshot_ids=snapshot,
            attempt=attempt,
        )
        audit_record(
            actor=SYSTEM,
            action=RecoveryAction.SESSION_MOUNT_REQUESTED,
            target=row,
            data={
                "site": run.site.name,
                "vm": r.vm_name,
                "vpg": r.vpg_name,
                "checkpoint": r.checkpoint_identifier,
                "attempt": attempt,
            },
            request_id=run.request_id,
        )
    row.site = run.site
    try:
        session_id = run.client.flr_mount(
            vpg_id=r.vpg_identifier, vm_id=r.vm_identifier, checkpoint_id=r.checkpoint_identifier
        )
    except ZvmRejectedError as exc:  # a 4xx: the mount did not start
        session_transition(
            row=row,
            to=S.ENDED,
            actor=SYSTEM,
            action=RecoveryAction.SESSION_MOUNT_FAILED,
            data={"error": str(exc)},
            end_reason="mount refused",
            last_error=str(exc)[:2000],
            request_id=run.request_id,
        )
        # A checkpoint may leave the journal between the check above and the mount.
        gone = journal_gone_reason(run.client, r, run.site)
        raise RunFailed(gone or f"{run.site.name} refused the mount: {exc}") from exc
    except ZvmError as exc:  # unreadable answer, timeout, 5xx: the mount may have started
        _mount_unknown(run, row, exc)
    session_transition(row=row, to=S.MOUNTING, actor=SYSTEM, session_id=session_id)
    return row


def _mount_unknown(run: Run, row: FlrSession, exc: ZvmError) -> None:
    """Find the session a lost mount answer would have named; unmount it now or leave it to the reaper. What the
    person and the agent are told follows what the ZVM's list showed: none this mount started, several that fit,
    or no list at all."""
    session_transition(row=row, to=S.UNKNOWN, actor=SYSTEM, last_error=str(exc)[:2000])
    why = ""
    try:
        found, fitting = find_unknown_session(run.client, row)
    except ZvmError as listing:
        found, fitting, why = None, -1, f"its sessions could not be listed ({listing})"
    if found is None and fitting == 0:
        late = "should the ZVM still start one, the reaper finds and unmounts it"
        _store_unmount(run.recovery, UnmountReport(True, "", f"nothing was mounted; {late}"))
        raise RunFailed(
            f"the mount answer from {run.site.name} was unusable ({exc}), and it lists no session that this "
            f"mount started: nothing is mounted; {late}"
        )
    if found is None:
        why = why or f"{fitting} of its sessions fit this mount, and which one is ours cannot be told"
        _store_unmount(
            run.recovery,
            UnmountReport(False, "unknown", f"the mount's session could not be identified yet ({why}); the reaper "
                          "keeps looking and unmounts it once it can tell"),
        )  # fmt: skip
        raise RunFailed(
            f"the mount answer from {run.site.name} was unusable ({exc}) and its session could not be identified "
            f"({why}); the reaper keeps looking and unmounts it once it can tell"
        )
    report = _unmount(run, row)
    _store_unmount(run.recovery, report)
    raise RunFailed(f"the mount answer from {run.site.name} was unusable ({exc}); its session {found} was unmounted")


def _wait_mounted(run: Run, row: FlrSession) -> None:
    delay = 0.1
    while True:
        try:
            session = session_lookup(run.client, row.session_id, row.vm_identifier)
        except ZvmNotFoundError:
            raise SessionVanished(row.session_id) from None
        if session.is_mounted:
            session_transition(
                row=row,
                to=S.MOUNTED,
                actor=SYSTEM,
                action=RecoveryAction.SESSION_MOUNTED,
                data={"status": session.status},
                request_id=run.request_id,
            )
            return
        if session.is_terminal:
            gone = journal_gone_reason(run.client, run.recovery, run.site)
            raise RunFailed(gone or f"the mount failed on {run.site.name} (status {session.status})")
        if time.monotonic() >= run.deadline:
            raise RunFailed(
                f"the mount did not complete within {settings.REWIND_FLR_TIME_LIMIT_S} s (status {session.status})"
            )
        time.sleep(delay)
        delay = min(1.0, delay * 1.5)


_UNSAFE = re.compile(r"[^A-Za-z0-9._ -]+")


def _download(run: Run, row: FlrSession, match: Match) -> tuple[Path, DownloadResult]:
    folder = Path(settings.REWIND_STORAGE_DIR) / str(run.recovery.pk)
    folder.mkdir(parents=True, exist_ok=True)
    name = _UNSAFE.sub("_", match.item.name).strip(" .") or "file"
    final = folder / name
    partial = folder / f".{uuid.uuid4().hex}.part"
    try:
        # Unbuffered: a full disk fails the write that met it, never a close after the download.
        with _storage(lambda: partial.open("wb", buffering=0)) as file:
            result = run.client.flr_download(row.session_id, match.flr_path, cast(BinaryIO, _StorageSink(file)))
        kept = _storage(lambda: partial.stat().st_size)
        if kept != result.size:
            raise _StorageError(OSError(errno.EIO, f"{kept} of {result.size} bytes were kept"))
        _storage(lambda: os.replace(partial, final))
    except _StorageError as exc:
        partial.unlink(missing_ok=True)
        logger.error("recovery %s: %s did not take the file: %s", run.recovery.pk, folder, exc.__cause__)
        raise _storage_failed(exc.oserror, mounted=True) from exc
    except ZvmNotFoundError as exc:
        partial.unlink(missing_ok=True)
        # A 404 may mean the session went, or only the link (undocumented): look, never assume.
        _raise_if_vanished(run, row)
        raise RunFailed(f"{run.site.name} would not serve {match.flr_path}: {exc}") from exc
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    with transaction.atomic():
        audit_record(
            actor=SYSTEM,
            action=RecoveryAction.FILE_DOWNLOADED,
            target=run.recovery,
            data={
                "flr_path": match.flr_path,
                "sha256": result.sha256,
                "size": result.size,
                "zipped": result.zipped,
                "session_id": row.session_id,
            },
            request_id=run.request_id,
        )
    return final, result


class _StorageError(Exception):
    """Writing the file here failed (a full disk, a read-only mount): our side, not the ZVM's."""

    def __init__(self, oserror: OSError) -> None:
        super().__init__(str(oserror))
        self.oserror = oserror


def _storage[T](step: Callable[[], T]) -> T:
    """A step on the recovered-files folder, its OSError told apart from the download's."""
    try:
        return step()
    except OSError as exc:
        raise _StorageError(exc) from exc


class _StorageSink:
    """The file being written, telling its own failures apart from the download's (which may raise OSError too)."""

    def __init__(self, file: BinaryIO) -> None:
        self._file = file

    def write(self, data: bytes) -> int:
        # An unbuffered write may take part of the bytes (a disk that just filled): the rest is
        # written again, and the write that then fails says why. Never a short file in silence.
        view, done = memoryview(data), 0
        while done < len(view):
            try:
                written = self._file.write(view[done:])
            except OSError as exc:
                raise _StorageError(exc) from exc
            if not written:
                raise _StorageError(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
            done += written
        return done


def _raise_if_vanished(run: Run, row: FlrSession) -> None:
    try:
        session = session_lookup(run.client, row.session_id, row.vm_identifier)
    except ZvmNotFoundError:
        raise SessionVanished(row.session_id) from None
    except ZvmError:
        return  # cannot tell: the caller reports what the ZVM said
    if session.is_terminal:
        raise SessionVanished(row.session_id)


def _vanished(row: FlrSession, reason: str) -> None:
    row.refresh_from_db()
    session_mark_vanished(row=row, actor=SYSTEM, reason=reason)


def _unmount(run: Run, row: FlrSession) -> UnmountReport:
    row.refresh_from_db()
    if not row.session_id:
        return UnmountReport(False, "unknown", "the session id is not known; the reaper will find and unmount it")
    report = session_unmount(
        client=run.client,
        row=row,
        actor=SYSTEM,
        reason=f"recovery #{run.recovery.pk} finished",
        wait_gone_s=UNMOUNT_WAIT_S,
        request_id=run.request_id,
    )
    return report or UnmountReport(True, row.session_id, "another task was already unmounting it")


def _store_unmount(recovery: RecoveryRequest, report: UnmountReport) -> None:
    RecoveryRequest.objects.filter(pk=recovery.pk).update(
        unmount_ok=report.ok, unmount_session_id=report.session_id, unmount_warning=report.warning
    )


def _finish_succeeded(
    run: Run, stored: Path, result: DownloadResult, match: Match, report: UnmountReport, fetched: Fetched | None
) -> None:
    r = run.recovery
    folder: dict[str, object] = {}
    if fetched is not None:
        folder = {
            "manifest": [e.as_json() for e in fetched.entries],
            "manifest_skipped": fetched.skipped,
        }
    with transaction.atomic():
        won = RecoveryRequest.objects.filter(pk=r.pk, status=Status.RUNNING).update(
            # A restore in place goes on: the file in the guest is compared, then a person confirms.
            status=Status.CONFIRM if r.restore else Status.SUCCEEDED,
            restore_state=RestoreState.COMPARING if r.restore else "",
            ok=True,
            sha256=result.sha256,
            size=result.size,
            stored_path=str(stored),
            flr_path=match.flr_path,
            unmount_ok=report.ok,
            unmount_session_id=report.session_id,
            unmount_warning=report.warning,
            finished_at=timezone.now(),
            error="",
            **folder,
        )
        if won:
            counts = {"files": len(fetched.entries), "bytes": fetched.total_bytes} if fetched else {}
            audit_record(
                actor=SYSTEM,
                action=RecoveryAction.SUCCEEDED,
                target=r,
                data={"sha256": result.sha256, "size": result.size, "unmount": report.as_dict(), **counts},
                request_id=run.request_id,
            )
        else:
            # The reaper gave up on it meanwhile (time limit); keep the bytes off the books.
            stored.unlink(missing_ok=True)


def _finish_failed(recovery: RecoveryRequest, message: str, request_id: str) -> None:
    with transaction.atomic():
        won = RecoveryRequest.objects.filter(pk=recovery.pk, status=Status.RUNNING).update(
            status=Status.FAILED, ok=False, error=message[:4000], finished_at=timezone.now()
        )
        if won:
            audit_record(
                actor=SYSTEM,
                action=RecoveryAction.FAILED,
                target=recovery,
                data={"error": message[:4000]},
                request_id=request_id,
            )
