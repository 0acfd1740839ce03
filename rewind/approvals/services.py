"""Every change of a held call: hold, approve, deny, expire, and the release's claim and outcome.

State moves are compare-and-swap updates, each audited in its transaction (fail-closed): a double
click, two approvers at once, a repeated task or two processes releasing the same call act once.
Approvals come only from signed-in people holding ``rewind.approve_heldcall``; nothing here takes
an agent as an approver, and the agent's own owner may not approve its calls.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AnonymousUser, User
from django.db import IntegrityError, transaction
from django.db.models import Manager
from django.utils import timezone

from rewind.approvals.announce import held_call_announce
from rewind.approvals.jcs import CanonicalizationError, digest
from rewind.approvals.models import HeldCall
from rewind.audit import SYSTEM, Actor, audit_record, mask_secrets
from rewind.audit.actions import ApprovalAction
from rewind.lib.crypto import decrypt, encrypt
from rewind.lib.errors import ApplicationError, NotFoundError, PermissionDeniedError
from rewind.lib.requestid import current_request_id
from rewind.workers.broker import queue_task

logger = logging.getLogger(__name__)
State = HeldCall.State
APPROVE_PERMISSION = "rewind.approve_heldcall"
RELEASE_TASK = "rewind.gateway.held_call_release"
NOTE_MAX = 500
# A result larger than this is not kept whole: the status says so (the agent's waiting call got it).
RESULT_KEPT_MAX = 1024 * 1024


def arguments_digest(arguments: Mapping[str, Any]) -> str:
    """The digest an approval binds; raises ``ApplicationError`` for arguments RFC 8785 cannot write."""
    try:
        return digest(dict(arguments))
    except CanonicalizationError as exc:
        raise ApplicationError(f"the arguments cannot be bound to an approval: {exc}") from None


@dataclass(frozen=True)
class HoldRequest:
    """What a call to hold is: who, which tool, the exact arguments, where, and why a person."""

    mode: str
    agent_id: int | None
    agent_name: str
    tool: str
    arguments: Mapping[str, Any]
    reason: str
    policy_version: int
    vm: str = ""
    vm_identifier: str = ""
    guard_id: int | None = None
    guard_ok: bool | None = None  # None: still taking its checkpoints
    checkpoints: Sequence[Mapping[str, Any]] = ()
    upstream_id: int | None = None
    exposed_name: str = ""
    tool_digest: str = ""
    call_id: str = ""
    change_id: str = ""
    request_id: str = ""


def held_call_open(hold: HoldRequest) -> HeldCall:
    """Hold a call for a person; the same guard, tool and arguments give back the held call there is.

    With a guard still taking its checkpoints the call waits as ``guarding`` (``held_call_guard_ended``
    moves it on); otherwise it is ``pending`` and every channel is told, with the page's link.
    Raises ``ApplicationError`` for arguments that cannot be bound (RFC 8785). Audited.
    """
    bound = arguments_digest(hold.arguments)
    if hold.guard_id is not None:
        existing = HeldCall.objects.filter(guard_id=hold.guard_id, tool=hold.tool, arguments_digest=bound).first()
        if existing is not None:
            return existing
    state = State.GUARDING if hold.guard_id is not None and hold.guard_ok is None else State.PENDING
    try:
        with transaction.atomic():
            held = HeldCall.objects.create(
                mode=hold.mode,
                state=state,
                agent_id=hold.agent_id,
                agent_name=hold.agent_name,
                tool=hold.tool,
                upstream_id=hold.upstream_id,
                exposed_name=hold.exposed_name,
                tool_digest=hold.tool_digest,
                arguments_encrypted=encrypt(json.dumps(dict(hold.arguments))),
                arguments_shown=mask_secrets(dict(hold.arguments)),
                arguments_digest=bound,
                vm=hold.vm,
                vm_identifier=hold.vm_identifier,
                checkpoints=list(hold.checkpoints),
                guard_id=hold.guard_id,
                call_id=hold.call_id,
                change_id=hold.change_id,
                reason=hold.reason[:500],
                policy_version=hold.policy_version,
                approvals_required=2 if settings.REWIND_APPROVAL_SECOND_APPROVER else 1,
                expires_at=timezone.now() + timedelta(seconds=settings.REWIND_APPROVAL_EXPIRY_S),
                request_id=hold.request_id or current_request_id() or "",
            )
            audit_record(
                actor=Actor.agent(hold.agent_name),
                action=ApprovalAction.HELD,
                target=held,
                data={**held.audit_data(), "reason": held.reason, "state": held.state},
                request_id=held.request_id,
            )
            if state == State.PENDING:
                held_call_announce(held=held)
    except IntegrityError:
        # The same guard, tool and arguments held at the same moment by another process: that one.
        return HeldCall.objects.get(guard_id=hold.guard_id, tool=hold.tool, arguments_digest=bound)
    return held


def held_call_guard_ended(*, held_id: int, ok: bool, checkpoints: Sequence[Mapping[str, Any]], why: str = "") -> bool:
    """Its guard ended: ``pending`` with its checkpoints (every channel told), or ``refused`` saying why.

    A no-op (False) unless it is still ``guarding``: every reader may call it.
    """
    now = timezone.now()
    with transaction.atomic():
        if ok:
            won = HeldCall.objects.filter(pk=held_id, state=State.GUARDING).update(
                state=State.PENDING, checkpoints=list(checkpoints)
            )
        else:
            won = HeldCall.objects.filter(pk=held_id, state=State.GUARDING).update(
                state=State.REFUSED, finished_at=now, refusal=f"not held for a person: its guard failed: {why}"[:2000]
            )
        if not won:
            return False
        held = HeldCall.objects.get(pk=held_id)
        if ok:
            held_call_announce(held=held)
        else:
            audit_record(
                actor=SYSTEM,
                action=ApprovalAction.REFUSED,
                target=held,
                data={"refusal": held.refusal, **held.audit_data()},
                request_id=held.request_id,
            )
    return True


# -- people decide -----------------------------------------------------------------------------


def _approver(user: User | AnonymousUser) -> User:
    """The deciding person, or ``PermissionDeniedError``: an agent is never a signed-in user here."""
    if not isinstance(user, User) or not user.is_authenticated or not user.is_active:
        raise PermissionDeniedError("only a signed-in person may decide on a held call")
    if not user.has_perm(APPROVE_PERMISSION):
        raise PermissionDeniedError(f"you lack the permission to approve or deny held calls ({APPROVE_PERMISSION})")
    return user


def owner_refusal(held: HeldCall, user: User) -> str | None:
    """Why ``user`` may not approve ``held`` (they own the asking agent), or None."""
    if held.agent is not None and held.agent.owner_id == user.pk:
        return f"you own agent {held.agent_name}, which made this call; someone else must approve it"
    return None


def _get(held_id: int) -> HeldCall:
    held = HeldCall.objects.select_related("agent").filter(pk=held_id).first()
    if held is None:
        raise NotFoundError(f"there is no held call #{held_id}")
    return held


def _expire_if_due(held: HeldCall, now: datetime) -> None:
    if held.state in HeldCall.OPEN and held.expires_at <= now:
        held_call_expire(held_id=held.pk, now=now)
        raise ApplicationError(f"held call #{held.pk} expired at {held.expires_at:%Y-%m-%d %H:%M:%S} UTC")


def held_call_approve(
    *, held_id: int, user: User | AnonymousUser, seen_digest: str, request_id: str | None = None
) -> HeldCall:
    """Record ``user``'s approval of exactly the arguments they were shown (``seen_digest``); once enough
    distinct people approved, the call is ``approved`` and, through the gateway, its release is queued.

    Refused (``PermissionDeniedError``) without the permission or for the agent's owner; refused
    (``ApplicationError``) when the call is not pending (guarding, decided, expired), when this
    person approved it already, or when the digest is not the call's. A repeat therefore acts once.
    """
    held = _get(held_id)
    approver = _approver(user)
    if (why := owner_refusal(held, approver)) is not None:
        raise PermissionDeniedError(why)
    if seen_digest != held.arguments_digest:
        raise ApplicationError(
            f"held call #{held.pk}: the digest given is not that of its arguments; approve what its page shows"
        )
    now = timezone.now()
    _expire_if_due(held, now)
    rid = request_id or current_request_id()
    with transaction.atomic():
        locked = HeldCall.objects.select_for_update().get(pk=held.pk)
        if locked.state != State.PENDING:
            raise ApplicationError(f"held call #{locked.pk} is {locked.state}; only a pending call can be approved")
        count, complete = approval_add(
            locked.approvals, approver, required=locked.approvals_required, what=f"held call #{locked.pk}"
        )
        if complete:
            won = HeldCall.objects.filter(pk=locked.pk, state=State.PENDING).update(
                state=State.APPROVED, decided_at=now, decided_by=approver.get_username()
            )
            if not won:
                raise ApplicationError(f"held call #{locked.pk} was decided meanwhile")
            if locked.mode == HeldCall.Mode.GATEWAY:
                _queue_release(locked.pk)
        audit_record(
            actor=Actor.user(approver.get_username()),
            action=ApprovalAction.APPROVED,
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


def approval_add(approvals: Manager[Any], approver: User, *, required: int, what: str) -> tuple[int, bool]:
    """One more person's approval of a row locked for update, through its ``approvals``; returns how many
    approved and whether that is enough. Refused (``ApplicationError``) when this person approved already."""
    if approvals.filter(approver_id=approver.pk).exists():
        raise ApplicationError(f"you already approved {what}; a second approver must be someone else")
    approvals.create(approver=approver, approver_name=approver.get_username())
    count = approvals.count()
    return count, count >= required


def _queue_release(held_id: int) -> None:
    """The approval stands whatever the queue does: the waiting call releases it itself, and the beat's
    sweep queues what no one released (``held_calls_sweep``)."""
    queue_task(RELEASE_TASK, held_id, what=f"the release of held call #{held_id}")


def held_call_deny(
    *, held_id: int, user: User | AnonymousUser, note: str = "", request_id: str | None = None
) -> HeldCall:
    """Deny a held call not decided yet; the agent's owner may deny (stopping is always safe). Acts once."""
    held = _get(held_id)
    person = _approver(user)
    now = timezone.now()
    _expire_if_due(held, now)
    note = " ".join((note or "").split())[:NOTE_MAX]
    with transaction.atomic():
        won = HeldCall.objects.filter(pk=held.pk, state__in=HeldCall.OPEN).update(
            state=State.DENIED,
            decided_at=now,
            decided_by=person.get_username(),
            finished_at=now,
            refusal=f"denied by {person.get_username()}" + (f": {note}" if note else ""),
        )
        if not won:
            held.refresh_from_db()
            raise ApplicationError(f"held call #{held.pk} is {held.state}; only a call not yet decided can be denied")
        held.refresh_from_db()
        audit_record(
            actor=Actor.user(person.get_username()),
            action=ApprovalAction.DENIED,
            target=held,
            data={"note": note, **held.audit_data()},
            request_id=request_id,
        )
    return held


def held_call_expire(*, held_id: int, now: datetime | None = None) -> bool:
    """Move a call nobody decided in time to ``expired``; False when it was not due or not open."""
    now = now or timezone.now()
    with transaction.atomic():
        won = HeldCall.objects.filter(pk=held_id, state__in=HeldCall.OPEN, expires_at__lte=now).update(
            state=State.EXPIRED, finished_at=now, refusal="nobody approved it in time"
        )
        if won:
            held = HeldCall.objects.get(pk=held_id)
            audit_record(
                actor=SYSTEM,
                action=ApprovalAction.EXPIRED,
                target=held,
                data=held.audit_data(),
                request_id=held.request_id,
            )
    return bool(won)


# -- the release (through the gateway) -----------------------------------------------------------


def held_call_claim(*, held_id: int) -> HeldCall | None:
    """Claim an approved gateway call for its release: the one caller that wins goes on, every other
    (a double click's second task, the waiting call in another process) gets None. Not audited here:
    the release is, once its checks passed, before anything is forwarded."""
    now = timezone.now()
    won = HeldCall.objects.filter(pk=held_id, state=State.APPROVED, mode=HeldCall.Mode.GATEWAY).update(
        state=State.RELEASING, released_at=now
    )
    return HeldCall.objects.get(pk=held_id) if won else None


def held_call_arguments(held: HeldCall) -> dict[str, Any]:
    """The exact arguments approved; raises ``ApplicationError`` if what is stored is not what was bound."""
    arguments = json.loads(decrypt(held.arguments_encrypted))
    if arguments_digest(arguments) != held.arguments_digest:
        raise ApplicationError(f"held call #{held.pk}: its stored arguments are not those approved; nothing forwarded")
    return arguments


@transaction.atomic
def held_call_release_refuse(*, held: HeldCall, refusal: str, policy_version: int | None = None) -> HeldCall:
    """The release's checks refused it: ``refused``, saying which, audited. Nothing was forwarded."""
    now = timezone.now()
    won = HeldCall.objects.filter(pk=held.pk, state=State.RELEASING).update(
        state=State.REFUSED, finished_at=now, refusal=refusal[:2000], released_policy_version=policy_version
    )
    held.refresh_from_db()
    if won:
        audit_record(
            actor=SYSTEM,
            action=ApprovalAction.REFUSED,
            target=held,
            data={"refusal": held.refusal, "policy_version_now": policy_version, **held.audit_data()},
            request_id=held.request_id,
        )
    return held


@transaction.atomic
def held_call_released(*, held: HeldCall, policy_version: int) -> None:
    """Its checks passed: recorded (fail-closed) before the approved arguments go out."""
    HeldCall.objects.filter(pk=held.pk, state=State.RELEASING).update(released_policy_version=policy_version)
    audit_record(
        actor=SYSTEM,
        action=ApprovalAction.RELEASED,
        target=held,
        data={"policy_version_now": policy_version, "approved_by": held.decided_by, **held.audit_data()},
        request_id=held.request_id,
    )


def _kept(result: Mapping[str, Any]) -> str:
    text = json.dumps(result)
    if len(text) > RESULT_KEPT_MAX:
        note = f"the upstream's answer ({len(text)} bytes) was larger than this service keeps; the waiting call had it"
        text = json.dumps({"content": [{"type": "text", "text": note}], "isError": result.get("isError", False)})
    return encrypt(text)


@transaction.atomic
def held_call_finish(*, held: HeldCall, outcome: str, result: Mapping[str, Any]) -> HeldCall:
    """How the forwarded call ended upstream (ok, error, upstream_failed) and its answer (kept encrypted)."""
    now = timezone.now()
    HeldCall.objects.filter(pk=held.pk, state=State.RELEASING).update(
        state=State.FORWARDED, outcome=outcome, finished_at=now, result_encrypted=_kept(result)
    )
    held.refresh_from_db()
    audit_record(
        actor=SYSTEM,
        action=ApprovalAction.FINISHED,
        target=held,
        data={"outcome": outcome, "call_id": held.call_id, "tool": held.tool},
        request_id=held.request_id,
    )
    return held


def held_call_result(held: HeldCall) -> dict[str, Any] | None:
    """The forwarded call's answer as kept (a CallToolResult's JSON), None before there is one."""
    if not held.result_encrypted:
        return None
    loaded: dict[str, Any] = json.loads(decrypt(held.result_encrypted))
    return loaded


# -- sweeps ------------------------------------------------------------------------------------

# A release still ``releasing`` this long after its claim lost its process midway: its outcome is unknown.
RELEASE_LOST_AFTER = timedelta(hours=2)
# An approval not released this long after it was decided lost its task (a broker that refused it).
RELEASE_DUE_AFTER = timedelta(seconds=30)


@dataclass
class SweepReport:
    expired: int = 0
    release_queued: int = 0
    release_lost: int = 0


def held_calls_sweep(*, now: datetime | None = None) -> SweepReport:
    """The beat's sweep: expire what nobody decided in time, queue the release of approvals nobody
    released, and end releases whose process died (the call may or may not have run). Safe to overlap."""
    now = now or timezone.now()
    report = SweepReport()
    due = HeldCall.objects.filter(state__in=HeldCall.OPEN, expires_at__lte=now).values_list("pk", flat=True)
    report.expired = sum(held_call_expire(held_id=pk, now=now) for pk in list(due[:500]))
    approved = HeldCall.objects.filter(
        state=State.APPROVED, mode=HeldCall.Mode.GATEWAY, decided_at__lte=now - RELEASE_DUE_AFTER
    )
    for pk in list(approved.values_list("pk", flat=True)[:200]):
        _queue_release(pk)
        report.release_queued += 1
    lost = HeldCall.objects.filter(state=State.RELEASING, released_at__lte=now - RELEASE_LOST_AFTER)
    for held in list(lost[:200]):
        with transaction.atomic():
            won = HeldCall.objects.filter(pk=held.pk, state=State.RELEASING).update(
                state=State.FORWARDED,
                outcome="unknown",
                finished_at=now,
                refusal="the process releasing it ended before it recorded the outcome: the call may or may not have run",
            )
            if won:
                audit_record(
                    actor=SYSTEM,
                    action=ApprovalAction.FINISHED,
                    target=held,
                    data={"outcome": "unknown", "call_id": held.call_id, "tool": held.tool},
                )
                report.release_lost += 1
    return report
