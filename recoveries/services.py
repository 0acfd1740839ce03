"""Recovery requests: create, approve, deny, expire. Every change is audited with its actor.

Approvals come only from Django users holding ``recoveries.approve_recovery``, never an agent. Status moves are
compare-and-swaps, so a double click or two approvers racing act once.
"""

from __future__ import annotations

import logging
import shutil
from datetime import datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.contrib.auth.models import AnonymousUser, User
from django.db import transaction
from django.utils import timezone

from recoveries.announce import recovery_announce
from recoveries.models import RecoveryRequest
from recoveries.paths import parse_guest_path
from recoveries.resolve import bind_checkpoint
from recoveries.restore.guest_tools import restore_refusal
from recoveries.undo import Moment, moment_of_call, moment_of_time
from rewind.agents.limits import VmLimit
from rewind.agents.models import Agent
from rewind.approvals.services import approval_add
from rewind.audit import SYSTEM, Actor, audit_record
from rewind.audit.actions import RecoveryAction
from rewind.lib.errors import ApplicationError, NotFoundError, PermissionDeniedError
from rewind.lib.requestid import current_request_id
from rewind.workers.broker import queue_task

logger = logging.getLogger(__name__)
Status = RecoveryRequest.Status
APPROVE_PERMISSION = "recoveries.approve_recovery"
ASK_PERMISSION = "recoveries.add_recoveryrequest"
MAX_REASON_LENGTH = 2000


def _moment(agent: Agent | None, before_call: str | None, point_in_time: str | None) -> Moment | None:
    """The moment an undo goes back before; an agent names only its own calls, a person any agent's."""
    if before_call is not None and point_in_time is not None:
        raise ApplicationError("give before_call or point_in_time, not both")
    if before_call is not None:
        return moment_of_call(before_call, agent_name=agent.name if agent is not None else None)
    if point_in_time is not None:
        return moment_of_time(point_in_time)
    return None


def _requester(agent: Agent | None, person: User | AnonymousUser | None) -> tuple[Actor, VmLimit, User | None]:
    """Who asks (as the audit names them), the VM limit they ask within, and the person (None for an agent);
    refused when they may not. A person is held to no agent's limit: it narrows an agent's token, not a person."""
    if (agent is None) == (person is None):
        raise ApplicationError("a recovery is asked for by an agent or by a person: name exactly one")
    if agent is not None:
        if not agent.is_active:
            raise PermissionDeniedError(f"agent {agent.name} is disabled")
        return Actor.agent(agent.name), VmLimit.of(agent), None
    if not isinstance(person, User) or not person.is_authenticated or not person.is_active or not person.is_staff:
        raise PermissionDeniedError("only a signed-in, active staff person may ask for a recovery")
    if not person.has_perm(ASK_PERMISSION):
        raise PermissionDeniedError(f"you lack the permission to ask for recoveries ({ASK_PERMISSION})")
    return Actor.user(person.get_username()), VmLimit(), person


def recovery_request_create(
    *,
    agent: Agent | None = None,
    person: User | AnonymousUser | None = None,
    vm: str,
    path: str,
    reason: str,
    checkpoint: str | None = None,
    change_id: str | None = None,
    before_call: str | None = None,
    point_in_time: str | None = None,
    recursive: bool = False,
    restore: bool = False,
    request_id: str | None = None,
) -> RecoveryRequest:
    """Record a pending request bound to one VM, path and checkpoint, asked by ``agent`` or ``person``
    (docs/recovery.md). Not idempotent: each call is a new request. Calls the ZVMs outside any transaction.

    A person must be active staff holding ``recoveries.add_recoveryrequest``; whoever asked may not approve nor
    confirm the write-back. ``restore`` writes the file back once approved and a person confirmed the diff;
    ``before_call`` or ``point_in_time`` undo a change; ``recursive`` brings a folder back whole.

    Raises ``ApplicationError`` (bad path, empty reason, unknown or ambiguous VM, no usable checkpoint, neither
    or both of agent and person) or ``PermissionDeniedError`` (a disabled agent, a person who may not ask); then
    nothing is recorded.
    """
    if not isinstance(recursive, bool):
        raise ApplicationError("recursive must be true or false")
    guest = parse_guest_path(path, folder=recursive)
    reason = (reason or "").strip()
    if not reason:
        raise ApplicationError("give a reason: the approver reads it before deciding")
    if len(reason) > MAX_REASON_LENGTH:
        raise ApplicationError(f"the reason is longer than {MAX_REASON_LENGTH} characters")
    if not vm or not str(vm).strip():
        raise ApplicationError("name the VM (its name, hostname or identifier)")
    actor, limit, asker = _requester(agent, person)
    if restore and (refusal := restore_refusal(vm_name=str(vm).strip(), os=guest.os, any_vm=True)):
        raise ApplicationError(refusal)  # before any ZVM is asked
    moment = _moment(agent, before_call, point_in_time)
    bound = bind_checkpoint(
        vm=str(vm).strip(),
        checkpoint=checkpoint,
        change_id=change_id,
        before=moment,
        limit=limit,
        agent_name=agent.name if agent is not None else "",
    )
    if restore and (refusal := restore_refusal(vm_name=bound.vm_name, os=guest.os)):
        raise ApplicationError(refusal)
    rid = request_id or current_request_id()
    with transaction.atomic():
        recovery = RecoveryRequest.objects.create(
            agent=agent,
            agent_name=agent.name if agent is not None else "",
            requested_by=asker,
            requested_by_name=asker.get_username() if asker is not None else "",
            vm_identifier=bound.vm_identifier,
            vm_name=bound.vm_name,
            path=path.strip(),
            normalized_path=guest.normalized,
            os=guest.os,
            reason=reason,
            recursive=recursive,
            checkpoint_identifier=bound.checkpoint_identifier,
            checkpoint_timestamp=bound.checkpoint_timestamp,
            checkpoint_tag=bound.tag,
            change_id=bound.change_id,
            checkpoint_source=bound.source,
            checkpoint_listed_late_at=bound.listed_late_at,
            undo_call_id=moment.call_id if moment else "",
            undo_before=moment.at if moment else None,
            undo_before_by_s=bound.before_by_s,
            vpg_identifier=bound.vpg_identifier,
            vpg_name=bound.vpg_name,
            recovery_site_identifier=bound.recovery_site_identifier,
            recovery_site_name=bound.recovery_site_name,
            approvals_required=2 if settings.REWIND_RECOVERY_SECOND_APPROVER else 1,
            expires_at=timezone.now() + timedelta(seconds=settings.REWIND_RECOVERY_EXPIRY_S),
            request_id=rid,
            restore=restore,
        )
        audit_record(
            actor=actor,
            action=RecoveryAction.REQUESTED,
            target=recovery,
            data=recovery.audit_data(),
            request_id=rid,
        )
        # Every channel (the approver e-mail among them) is told once this commits; a channel
        # that fails never fails the request, which waits in the admin queue regardless.
        recovery_announce(recovery=recovery, request_id=rid)
    logger.info(
        "recovery #%s of %s:%s by %s waits for approval",
        recovery.pk,
        recovery.vm_name,
        recovery.normalized_path,
        recovery.requester,
    )
    return recovery


def _check_approver(user: User | AnonymousUser, recovery: RecoveryRequest) -> User:
    """The deciding person, or ``PermissionDeniedError``; agents never reach here as users."""
    if not isinstance(user, User) or not user.is_authenticated or not user.is_active:
        raise PermissionDeniedError("only a signed-in person may decide on a recovery")
    if not user.has_perm(APPROVE_PERMISSION):
        raise PermissionDeniedError("you lack the permission to approve or deny recoveries")
    return user


def asked_by_them(recovery: RecoveryRequest, user: User) -> str | None:
    """Why ``user`` may not approve ``recovery`` nor confirm its write-back (four eyes), or None: the owner of the
    asking agent and the person who asked both stand behind the request."""
    if recovery.agent is not None and recovery.agent.owner_id == user.pk:
        return f"you own agent {recovery.agent_name}, which asked for this file"
    if recovery.requested_by_id is not None and recovery.requested_by_id == user.pk:
        return "you asked for this file yourself"
    return None


def _expire_if_due(recovery: RecoveryRequest, now: datetime) -> None:
    if recovery.status == Status.PENDING and recovery.expires_at <= now:
        recovery_request_expire(recovery_id=recovery.pk, now=now)
        raise ApplicationError(
            f"recovery #{recovery.pk} expired at {recovery.expires_at:%Y-%m-%d %H:%M:%S} UTC; ask again"
        )


def _get(recovery_id: int) -> RecoveryRequest:
    recovery = RecoveryRequest.objects.select_related("agent").filter(pk=recovery_id).first()
    if recovery is None:
        raise NotFoundError(f"there is no recovery #{recovery_id}")
    return recovery


def recovery_request_approve(
    *, recovery_id: int, user: User | AnonymousUser, request_id: str | None = None
) -> RecoveryRequest:
    """Record ``user``'s approval; once enough distinct approvers agreed, queue the run. Refused
    (``PermissionDeniedError``) without the permission or for the requesting agent's owner;
    (``ApplicationError``) when not pending, expired, or already approved by this user, so a repeated call acts
    once."""
    recovery = _get(recovery_id)
    approver = _check_approver(user, recovery)
    if (why := asked_by_them(recovery, approver)) is not None:
        raise PermissionDeniedError(f"{why}; someone else must approve it")
    now = timezone.now()
    _expire_if_due(recovery, now)
    rid = request_id or current_request_id()
    with transaction.atomic():
        locked = RecoveryRequest.objects.select_for_update().get(pk=recovery.pk)
        if locked.status != Status.PENDING:
            raise ApplicationError(f"recovery #{locked.pk} is {locked.status}; only a pending request can be approved")
        count, complete = approval_add(
            locked.approvals, approver, required=locked.approvals_required, what=f"recovery #{locked.pk}"
        )
        if complete:
            won = RecoveryRequest.objects.filter(pk=locked.pk, status=Status.PENDING).update(
                status=Status.APPROVED, decided_at=now, decided_by=approver.get_username()
            )
            if not won:
                raise ApplicationError(f"recovery #{locked.pk} was decided meanwhile")
            _queue_run(locked.pk, rid)
        audit_record(
            actor=Actor.user(approver.get_username()),
            action=RecoveryAction.APPROVED,
            target=locked,
            data={
                "approvals": count,
                "required": locked.approvals_required,
                "complete": complete,
                **locked.audit_data(),
            },
            request_id=rid,
        )
    locked.refresh_from_db()
    return locked


def _queue_run(recovery_id: int, request_id: str) -> None:
    """The approval stands whatever the task queue does: a run it refused is queued again by the beat's sweep, or
    once the queue answers."""
    queue_task("recoveries.run", recovery_id, request_id, what=f"the run of recovery #{recovery_id}")


def recovery_request_deny(
    *, recovery_id: int, user: User | AnonymousUser, note: str = "", request_id: str | None = None
) -> RecoveryRequest:
    """Deny a pending request. The agent's owner may deny (stopping is always safe)."""
    recovery = _get(recovery_id)
    approver = _check_approver(user, recovery)
    now = timezone.now()
    _expire_if_due(recovery, now)
    with transaction.atomic():
        won = RecoveryRequest.objects.filter(pk=recovery.pk, status=Status.PENDING).update(
            status=Status.DENIED,
            decided_at=now,
            decided_by=approver.get_username(),
            finished_at=now,
            error=f"denied by {approver.get_username()}" + (f": {note.strip()[:500]}" if note.strip() else ""),
        )
        if not won:
            recovery.refresh_from_db()
            raise ApplicationError(
                f"recovery #{recovery.pk} is {recovery.status}; only a pending request can be denied"
            )
        audit_record(
            actor=Actor.user(approver.get_username()),
            action=RecoveryAction.DENIED,
            target=recovery,
            data={"note": note.strip()[:500], **recovery.audit_data()},
            request_id=request_id,
        )
    recovery.refresh_from_db()
    return recovery


def recovery_request_expire(*, recovery_id: int, now: datetime | None = None, request_id: str | None = None) -> bool:
    """Move a pending request past its expiry to expired. False when it was not due or not pending."""
    now = now or timezone.now()
    with transaction.atomic():
        won = RecoveryRequest.objects.filter(pk=recovery_id, status=Status.PENDING, expires_at__lte=now).update(
            status=Status.EXPIRED, finished_at=now, error="nobody approved it in time"
        )
        if won:
            recovery = RecoveryRequest.objects.get(pk=recovery_id)
            audit_record(
                actor=SYSTEM,
                action=RecoveryAction.EXPIRED,
                target=recovery,
                data={
                    "expires_at": recovery.expires_at.isoformat(),
                    "vm": recovery.vm_name,
                    "path": recovery.normalized_path,
                },
                request_id=request_id,
            )
    return bool(won)


def recovery_result_purge(*, recovery_id: int, now: datetime | None = None, request_id: str | None = None) -> bool:
    """Delete the recovered bytes of one request and record it; False when already purged or none kept. The request
    keeps its sha256 and size. The file goes last inside the transaction, so one that cannot be deleted rolls
    the record back for the next sweep. Safe to repeat and to overlap."""
    now = now or timezone.now()
    with transaction.atomic():
        won = (
            RecoveryRequest.objects.filter(pk=recovery_id, purged_at__isnull=True)
            .exclude(stored_path="")
            .update(purged_at=now)
        )
        if not won:
            return False
        recovery = RecoveryRequest.objects.get(pk=recovery_id)
        audit_record(
            actor=SYSTEM,
            action=RecoveryAction.RESULT_PURGED,
            target=recovery,
            data={
                "vm": recovery.vm_name,
                "path": recovery.normalized_path,
                "sha256": recovery.sha256,
                "size": recovery.size,
                "finished_at": recovery.finished_at.isoformat() if recovery.finished_at else None,
                "retention_days": settings.REWIND_RECOVERED_RETENTION_DAYS,
            },
            request_id=request_id,
        )
        _delete_stored(recovery)
    return True


def _delete_stored(recovery: RecoveryRequest) -> None:
    stored = Path(recovery.stored_path)
    stored.unlink(missing_ok=True)
    # The runner keeps each file in a folder of its own (REWIND_STORAGE_DIR/<id>/); it goes too,
    # with any partial download a crashed run left there. Any other folder is not ours to remove.
    folder = Path(settings.REWIND_STORAGE_DIR) / str(recovery.pk)
    if stored.parent == folder and folder.is_dir():
        shutil.rmtree(folder)


def recovery_results_purge_expired(*, now: datetime | None = None) -> tuple[int, int]:
    """Purge the bytes of every finished request older than REWIND_RECOVERED_RETENTION_DAYS (0 keeps all); (purged,
    failed), a file that cannot be deleted logged and left for the next sweep."""
    days = settings.REWIND_RECOVERED_RETENTION_DAYS
    if days <= 0:
        return 0, 0
    now = now or timezone.now()
    ids = list(
        RecoveryRequest.objects.filter(
            status__in=RecoveryRequest.FINISHED, purged_at__isnull=True, finished_at__lte=now - timedelta(days=days)
        )
        .exclude(stored_path="")
        .values_list("pk", flat=True)
    )
    purged = failed = 0
    for pk in ids:
        try:
            # The record gets the real time even when a drill moved ``now`` forward.
            purged += recovery_result_purge(recovery_id=pk)
        except OSError as exc:
            failed += 1
            logger.warning("could not delete the recovered file of recovery #%s: %s", pk, exc)
    return purged, failed


def recovery_requests_expire_stale(*, now: datetime | None = None) -> int:
    """Expire every pending request past its deadline; returns how many this call expired."""
    now = now or timezone.now()
    ids = list(RecoveryRequest.objects.filter(status=Status.PENDING, expires_at__lte=now).values_list("pk", flat=True))
    return sum(recovery_request_expire(recovery_id=pk, now=now) for pk in ids)
