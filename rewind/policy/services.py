"""Every change of the policy goes here: its version, the VM rules, the stop switches. Audited in the
same transaction; only people change them (no agent, and so no MCP tool, reaches these)."""

from __future__ import annotations

import fnmatch
from typing import Any

from django.core.exceptions import ObjectDoesNotExist
from django.db import connection, transaction
from django.utils import timezone

from rewind.audit import Actor, audit_record
from rewind.audit.actions import PolicyAction
from rewind.lib.actors import USER
from rewind.lib.errors import ApplicationError, PermissionDeniedError
from rewind.notifications.models import NotificationKind
from rewind.notifications.services import notification_send, notifying
from rewind.policy.models import ApprovalRule, PolicyVersion, StopSwitch

REASON_MAX = 500


def _require_person(actor: Actor, what: str) -> None:
    if actor.type != USER:
        raise PermissionDeniedError(f"only a person may {what}; no agent or tool can")


def policy_version_raise(*, actor: Actor, what: str, request_id: str | None = None) -> int:
    """Raise the policy's version in the caller's transaction, audited; returns the new number.

    Called by every change of a catalog entry, an upstream tool's policy or default, a VM rule and an
    agent's "every change needs a person": a held call is released only after its decision is taken
    again, and every decision records the version it was made under.
    """
    table = connection.ops.quote_name(PolicyVersion._meta.db_table)
    with transaction.atomic(savepoint=False), connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (id, n, changed_at, changed_by, what) VALUES (1, 1, %s, %s, %s) "
            f"ON CONFLICT (id) DO UPDATE SET n = {table}.n + 1, changed_at = EXCLUDED.changed_at, "
            "changed_by = EXCLUDED.changed_by, what = EXCLUDED.what",
            [timezone.now(), actor.name[:150], what[:300]],
        )
        version = PolicyVersion.objects.values_list("n", flat=True).get(pk=1)
        audit_record(
            actor=actor,
            action=PolicyAction.VERSION_RAISED,
            target=("policy", "version"),
            data={"version": version, "what": what[:300]},
            request_id=request_id,
        )
    return int(version)


def _clean_rule(kind: str, value: str, note: str) -> tuple[str, str, str]:
    if kind not in ApprovalRule.Kind.values:
        raise ApplicationError(f"kind must be one of {', '.join(ApprovalRule.Kind.values)}")
    value = (value or "").strip()
    if not value or len(value) > 255 or any(not c.isprintable() for c in value):
        raise ApplicationError("give the VM name pattern, VPG name or site name the rule matches (one line)")
    if kind == ApprovalRule.Kind.VM_NAME:
        fnmatch.translate(value)  # any text is a valid pattern; kept for the reader
    return kind, value, (note or "").strip()[:300]


@transaction.atomic
def approval_rule_add(*, actor: Actor, kind: str, value: str, note: str = "") -> ApprovalRule:
    """A VM rule: changes to the VMs it matches wait for a person after their checkpoint. People only."""
    _require_person(actor, "add a VM rule")
    kind, value, note = _clean_rule(kind, value, note)
    if ApprovalRule.objects.filter(kind=kind, value__iexact=value).exists():
        raise ApplicationError(f"a rule for {kind} {value!r} exists already")
    rule = ApprovalRule.objects.create(kind=kind, value=value, note=note, created_by=actor.name[:150])
    audit_record(actor=actor, action=PolicyAction.RULE_ADDED, target=rule, data={"after": rule.audit_data()})
    policy_version_raise(actor=actor, what=f"VM rule added: {rule}")
    return rule


@transaction.atomic
def approval_rule_update(*, actor: Actor, rule: ApprovalRule, **fields: Any) -> ApprovalRule:
    """Change a rule's value, note or enabled flag. People only; a change that changes nothing records nothing."""
    _require_person(actor, "change a VM rule")
    unknown = set(fields) - {"value", "note", "enabled"}
    if unknown:
        raise ApplicationError(f"cannot change {', '.join(sorted(unknown))} of a VM rule")
    locked = ApprovalRule.objects.select_for_update().get(pk=rule.pk)
    before = locked.audit_data()
    _kind, locked.value, locked.note = _clean_rule(
        locked.kind, str(fields.get("value", locked.value)), str(fields.get("note", locked.note))
    )
    if "enabled" in fields:
        if not isinstance(fields["enabled"], bool):
            raise ApplicationError("enabled must be true or false")
        locked.enabled = fields["enabled"]
    after = locked.audit_data()
    if after == before:
        return locked
    locked.save()
    audit_record(actor=actor, action=PolicyAction.RULE_CHANGED, target=locked, data={"before": before, "after": after})
    policy_version_raise(actor=actor, what=f"VM rule changed: {locked}")
    return locked


@transaction.atomic
def approval_rule_remove(*, actor: Actor, rule: ApprovalRule) -> None:
    _require_person(actor, "remove a VM rule")
    locked = ApprovalRule.objects.select_for_update().filter(pk=rule.pk).first()
    if locked is None:
        return
    audit_record(
        actor=actor,
        action=PolicyAction.RULE_REMOVED,
        target=("rewind.approvalrule", str(locked.pk)),
        data={"before": locked.audit_data()},
    )
    policy_version_raise(actor=actor, what=f"VM rule removed: {locked}")
    locked.delete()


# -- stop switches -----------------------------------------------------------------------------


def _clean_stop(scope: str, agent: int | None, vm: str, reason: str) -> tuple[str, str]:
    if scope not in StopSwitch.Scope.values:
        raise ApplicationError(f"scope must be one of {', '.join(StopSwitch.Scope.values)}")
    reason = " ".join((reason or "").split())
    if not reason:
        raise ApplicationError("say why: every refused agent is told who stopped it and why")
    if len(reason) > REASON_MAX:
        raise ApplicationError(f"the reason is longer than {REASON_MAX} characters")
    vm = (vm or "").strip()
    if scope == StopSwitch.Scope.AGENT and agent is None:
        raise ApplicationError("name the agent to stop")
    if scope == StopSwitch.Scope.VM and (not vm or len(vm) > 255 or any(c.isspace() for c in vm)):
        raise ApplicationError("name the VM to stop (its name as Zerto shows it)")
    if scope != StopSwitch.Scope.AGENT and agent is not None:
        raise ApplicationError("an agent is named only for a stop of one agent")
    if scope != StopSwitch.Scope.VM and vm:
        raise ApplicationError("a VM is named only for a stop of one VM")
    return vm, reason


def _notify_stop(stop: StopSwitch, *, lifted: bool) -> None:
    with notifying(f"stop #{stop.pk} was {'lifted' if lifted else 'engaged'}"):
        if lifted:
            title = f"[zerto-rewind] Stop {stop.what} lifted by {stop.lifted_by}"
            body = f"Guarded changes {stop.what} may go ahead again. Stopped since {stop.stopped_at:%Y-%m-%d %H:%M} UTC"
            body += f" by {stop.stopped_by}: {stop.reason}." + (f"\nNote: {stop.lift_note}" if stop.lift_note else "")
        else:
            title = f"[zerto-rewind] Guarded changes stopped {stop.what} by {stop.stopped_by}"
            body = (
                f"{stop.stopped_by} stopped every guarded change {stop.what}: {stop.reason}.\n"
                "Guards and gateway calls are refused, saying so, until a person lifts the stop (admin: Stop switches)."
            )
        notification_send(
            kind=NotificationKind.STOP_LIFTED if lifted else NotificationKind.STOP_ENGAGED,
            dedupe_key=f"stop:{stop.pk}:{'lifted' if lifted else 'engaged'}",
            title=title,
            body=body,
            target=stop,
        )


@transaction.atomic
def stop_engage(
    *,
    actor: Actor,
    scope: str,
    reason: str,
    agent_id: int | None = None,
    vm: str = "",
    request_id: str | None = None,
) -> StopSwitch:
    """Stop every guarded change everywhere, of one agent (``agent_id``) or to one VM, at once in every
    process: guards and gateway calls read the stops afresh on every call. People only; audited and
    notified. A second stop of the same scope is refused: one lift must end it."""
    _require_person(actor, "stop guarded changes")
    vm, reason = _clean_stop(scope, agent_id, vm, reason)
    stop = StopSwitch(
        scope=scope, agent_id=agent_id, vm=vm, reason=reason, stopped_by=actor.name[:150], stopped_at=timezone.now()
    )
    try:
        stop.agent_name = stop.agent.name if agent_id is not None else ""  # type: ignore[union-attr]
    except ObjectDoesNotExist:
        raise ApplicationError(f"there is no agent #{agent_id}") from None
    same = StopSwitch.objects.filter(lifted_at__isnull=True, scope=scope)
    if scope == StopSwitch.Scope.AGENT:
        same = same.filter(agent_id=agent_id or 0)
    elif scope == StopSwitch.Scope.VM:
        same = same.filter(vm__iexact=vm)
    existing = same.first()
    if existing is not None:
        raise ApplicationError(
            f"changes {existing.what} are already stopped (stop #{existing.pk}, by {existing.stopped_by})"
        )
    stop.save()
    audit_record(
        actor=actor, action=PolicyAction.STOP_ENGAGED, target=stop, data=stop.audit_data(), request_id=request_id
    )
    _notify_stop(stop, lifted=False)
    return stop


@transaction.atomic
def stop_lift(*, actor: Actor, stop: StopSwitch, note: str = "", request_id: str | None = None) -> StopSwitch:
    """Lift a stop (people only). A stop already lifted is refused, so a double click lifts once."""
    _require_person(actor, "lift a stop")
    note = " ".join((note or "").split())[:REASON_MAX]
    now = timezone.now()
    won = StopSwitch.objects.filter(pk=stop.pk, lifted_at__isnull=True).update(
        lifted_at=now, lifted_by=actor.name[:150], lift_note=note
    )
    if not won:
        raise ApplicationError(f"stop #{stop.pk} was lifted already")
    lifted = StopSwitch.objects.get(pk=stop.pk)
    audit_record(
        actor=actor, action=PolicyAction.STOP_LIFTED, target=lifted, data=lifted.audit_data(), request_id=request_id
    )
    _notify_stop(lifted, lifted=True)
    return lifted


def stop_refused_record(*, agent_name: str, what: str, refusal: str, request_id: str | None = None) -> None:
    """A guard or a call the stop refused, audited (in the caller's transaction, or its own)."""
    with transaction.atomic(savepoint=False):
        audit_record(
            actor=Actor.agent(agent_name),
            action=PolicyAction.STOP_REFUSED,
            target=("policy", "stop"),
            data={"what": what[:300], "refusal": refusal[:600]},
            request_id=request_id,
        )
