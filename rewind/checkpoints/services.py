"""Guard before mutate and tagged checkpoints: the services that create and resume guards.

Flow: ``guard_before_mutate`` looks the tool up in the catalog (unlisted: audited pass
through + sighting), finds the VM in the arguments and calls ``guard_create``,
which finds the protection, refuses per the insert rules, records a guard with one tagged
checkpoint per VPG and, after commit, kicks the poller of each site its VPGs are protected at:
the site's next poll round inserts the checkpoints of every pending guard in one batch, then
waits for them to be listed (``rewind.checkpoints.poller``). A VPG whose protected site is
not configured here cannot take a checkpoint (no poller could insert it), so such a guard is
refused like any other, nothing inserted. Callers poll the record; a read restarts the
pollers of its sites whose chain died.

Refusal is all or nothing: when any VPG protecting the VM cannot take a checkpoint, nothing
is inserted anywhere. A partial set of checkpoints would let a change go ahead with a VPG
that cannot undo it, and would leave tags behind that no change used.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django.utils import timezone

from catalog.models import MutatingTool
from catalog.services import mutating_tool_match, normalize_tool_name, tool_sighting_record
from rewind.agents.selectors import agent_changes_need_approval, agent_vm_limit
from rewind.audit import Actor, AuditEntry, audit_append, audit_record
from rewind.audit.actions import GuardAction
from rewind.checkpoints.models import ChangeGuard, TaggedCheckpoint
from rewind.checkpoints.poller import poller_kick, pollers_restart_dead
from rewind.checkpoints.rows import RowEnd, guards_finish, rows_finish
from rewind.checkpoints.selectors import guard_of_change
from rewind.checkpoints.tags import build_tag, clean_action, clean_change_id
from rewind.lib.errors import ApplicationError, NotFoundError
from rewind.lib.requestid import current_request_id
from rewind.policy.models import Decision
from rewind.policy.selectors import Decided, decision_for_vm, stop_refusal
from rewind.protection import Protection, find_protection
from rewind.protection.within_limit import check_within

logger = logging.getLogger(__name__)

TIMEOUT_MAX_S = 3600


@dataclass(frozen=True)
class RefusedVpg:
    name: str
    identifier: str
    reason: str


@dataclass(frozen=True)
class GuardOutcome:
    """What creating a guard did.

    ``guarded`` False: the tool is not in the catalog (passed through, nothing recorded but
    the sighting). ``guard`` None with ``refusal`` set: refused, nothing inserted anywhere.
    ``created`` False: an existing record for the same VM and change id was returned.
    """

    guarded: bool
    guard: ChangeGuard | None = None
    created: bool = False
    refusal: str | None = None
    refused: tuple[RefusedVpg, ...] = ()
    entry: str | None = None
    vm: str | None = None
    change_id: str | None = None

    @property
    def needs_person(self) -> bool:
        """Its decision is ``approve``: once ok, the call waits for a person (``rewind.approvals``)."""
        return self.guard is not None and self.guard.decision == Decision.APPROVE


def clean_timeout(timeout_s: int | float | None) -> int:
    if timeout_s is None:
        return int(settings.REWIND_CHECKPOINT_TIMEOUT_S)
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not 1 <= timeout_s <= TIMEOUT_MAX_S:
        raise ApplicationError(f"timeout_s must be a number of seconds from 1 to {TIMEOUT_MAX_S}")
    return round(timeout_s)


def guard_create(
    *,
    agent_name: str,
    agent_id: int | None = None,
    vm: str,
    action: str,
    change_id: str | None = None,
    tool: str = "",
    timeout_s: int | float | None = None,
    request_id: str | None = None,
    decision: str = Decision.CHECKPOINT,
    decision_reason: str = "",
) -> GuardOutcome:
    """Record a guard: a tagged checkpoint requested on every VPG of ``vm`` and queue the wait.

    ``decision`` (``checkpoint`` or ``approve``, the catalog entry's or the gateway policy's) is
    raised to ``approve`` by a VM rule or the agent's setting, and recorded on the guard with the
    policy version (``rewind.policy``). A stop in force for this agent or VM refuses the guard,
    saying who stopped it and why, nothing inserted.

    Raises ApplicationError (bad input, unknown or ambiguous VM) with nothing changed.
    Repeatable: the same ``change_id`` for the same VM returns the existing record, also
    when several callers race (the unique constraint decides, the losers read the winner).
    Opens its own transactions; makes ZVM calls (the protection lookup) outside them.
    """
    action = clean_action(action)
    change = clean_change_id(change_id)
    timeout = clean_timeout(timeout_s)
    rid = request_id or current_request_id()
    protection = find_protection(vm)
    if agent_id is not None:
        check_within(agent_vm_limit(agent_id), protection, agent_name=agent_name)
    stopped = stop_refusal(
        agent_id=agent_id, agent_name=agent_name, vms=[vm, protection.vm_name or "", protection.vm_identifier]
    )
    if stopped is not None:
        return _refuse_stopped(agent_name, protection, vm, change, action, tool, stopped, rid)
    existing = guard_of_change(protection.vm_identifier, change)
    if existing is not None:
        if existing.agent_name != agent_name:
            raise ApplicationError(
                f"change_id {change!r} is already in use for {protection.vm_name} by another agent; choose another"
            )
        guard_resume_if_stale(existing)
        return GuardOutcome(guarded=True, guard=existing, created=False, vm=vm, change_id=change)
    refused = tuple(
        RefusedVpg(v.name or v.identifier, v.identifier, v.cannot_insert_reason or "a checkpoint cannot be inserted")
        for v in protection.vpgs
        if not v.can_insert_checkpoint
    )
    if not protection.vpgs or refused:
        return _refuse(agent_name, protection, vm, change, action, tool, refused, rid)
    decided = _decided(decision, decision_reason, protection, agent_id, agent_name)
    now = timezone.now()
    vm_name = protection.vm_name or protection.vm_identifier
    tag = build_tag(agent=agent_name, action=action, vm=vm_name, change_id=change, now=now)
    try:
        with transaction.atomic():
            guard = ChangeGuard.objects.create(
                agent_id=agent_id,
                agent_name=agent_name,
                tool=tool,
                action=action,
                vm_identifier=protection.vm_identifier,
                vm_name=vm_name,
                change_id=change,
                tag=tag,
                request_id=rid,
                timeout_s=timeout,
                decision=decided.decision,
                decision_reason=decided.reason[:500],
                policy_version=decided.version,
            )
            TaggedCheckpoint.objects.bulk_create([_tagged_checkpoint(guard, v) for v in protection.vpgs])
            # audit_append: every guard passes here, and nothing reads the event back.
            created = AuditEntry(
                actor=Actor.agent(agent_name),
                action=GuardAction.CREATED,
                target=guard,
                request_id=rid,
                data={
                    "vm": protection.vm_name,
                    "vm_identifier": protection.vm_identifier,
                    "change_id": change,
                    "tag": tag,
                    "tool": tool,
                    "timeout_s": timeout,
                    "vpgs": [v.name for v in protection.vpgs],
                    "decision": decided.decision,
                    "decision_reason": decided.reason[:500],
                    "policy_version": decided.version,
                },
            )
            audit_append([created])
            _queue_insert({v.protected_site.site_pk for v in protection.vpgs if v.protected_site.site_pk})
    except IntegrityError:
        # A concurrent request with the same change id for this VM won; return its record.
        winner = ChangeGuard.objects.get(vm_identifier=protection.vm_identifier, change_id=change)
        if winner.agent_name != agent_name:
            raise ApplicationError(
                f"change_id {change!r} is already in use for {protection.vm_name} by another agent; choose another"
            ) from None
        return GuardOutcome(guarded=True, guard=winner, created=False, vm=vm, change_id=change)
    return GuardOutcome(guarded=True, guard=guard, created=True, vm=vm, change_id=change)


def _decided(base: str, base_reason: str, protection: Protection, agent_id: int | None, agent_name: str) -> Decided:
    """The guard's decision: ``base`` raised by the VM rules and the agent's setting, with the policy version."""
    return decision_for_vm(
        base,
        base_reason=base_reason,
        vm_name=protection.vm_name or protection.vm_identifier,
        vpgs=[v.name or v.identifier for v in protection.vpgs],
        sites=[v.protected_site.name or v.protected_site.identifier or "" for v in protection.vpgs],
        agent_needs_person=agent_changes_need_approval(agent_id),
        agent_name=agent_name,
    )


def _refuse_stopped(
    agent_name: str, protection: Protection, vm: str, change: str, action: str, tool: str, refusal: str, rid: str
) -> GuardOutcome:
    """A stop in force covers this agent or VM: refused, audited, nothing inserted."""
    with transaction.atomic():
        audit_record(
            actor=Actor.agent(agent_name),
            action=GuardAction.REFUSED,
            target=("vm", protection.vm_identifier),
            request_id=rid,
            data={
                "vm": protection.vm_name,
                "change_id": change,
                "action": action,
                "tool": tool,
                "reason": refusal,
                "stopped": True,
            },
        )
    return GuardOutcome(guarded=True, refusal=refusal, vm=vm, change_id=change)


def _queue_insert(site_ids: set[int]) -> None:
    """Once committed, kick the poller of each of the guard's sites: its next round inserts, one batch per site.

    ``robust``: a kick that fails (the broker is down) leaves the poller's queued lease to run
    out; the beat's sweep or the next read of the guard starts the round then, so the guard is
    never lost.
    """
    for site_id in sorted(site_ids):
        transaction.on_commit(partial(poller_kick, site_id), robust=True)


def _tagged_checkpoint(guard: ChangeGuard, vpg: Any) -> TaggedCheckpoint:
    return TaggedCheckpoint(
        guard=guard,
        vpg_identifier=vpg.identifier,
        vpg_name=vpg.name,
        site_id=vpg.protected_site.site_pk,
        protected_site_identifier=vpg.protected_site.identifier or "",
        recovery_site_identifier=vpg.recovery_site.identifier or "",
        recovery_site_name=vpg.recovery_site.name or "",
    )


def _refuse(
    agent_name: str,
    protection: Any,
    vm: str,
    change: str,
    action: str,
    tool: str,
    refused: tuple[RefusedVpg, ...],
    rid: str,
) -> GuardOutcome:
    if refused:
        reasons = "; ".join(r.reason for r in refused)
        reason = f"no checkpoint was inserted on any VPG of {protection.vm_name}: {reasons}"
    else:
        reason = f"{protection.vm_name} is not protected by any VPG, so no checkpoint can be taken"
    with transaction.atomic():
        audit_record(
            actor=Actor.agent(agent_name),
            action=GuardAction.REFUSED,
            target=("vm", protection.vm_identifier),
            request_id=rid,
            data={
                "vm": protection.vm_name,
                "change_id": change,
                "action": action,
                "tool": tool,
                "reason": reason,
                "vpgs": [{"name": r.name, "identifier": r.identifier, "reason": r.reason} for r in refused],
            },
        )
    return GuardOutcome(guarded=True, refusal=reason, refused=refused, vm=vm, change_id=change)


def guard_resume_if_stale(guard: ChangeGuard) -> bool:
    """Restart the pollers of the guard's sites whose chain died; end its rows no site answers for.

    Called by every status read (and so by a waiting caller), so a guard finishes even when no
    beat runs. A guard holds no lease: whether it is served is whether its sites' pollers are
    alive. True when it restarted a poller or ended a row. Safe to call concurrently.
    """
    if guard.status not in ChangeGuard.UNFINISHED:
        return False
    sites = set(guard.vpgs.filter(status__in=TaggedCheckpoint.NOT_FINAL).values_list("site_id", flat=True))
    ended = 0
    if None in sites:
        ended = guards_orphaned_finish(ChangeGuard.objects.filter(pk=guard.pk))
        guard.refresh_from_db()
    restarted = pollers_restart_dead({s for s in sites if s is not None})
    if restarted:
        with transaction.atomic():
            audit_record(
                actor=Actor.system(),
                action=GuardAction.RESUMED,
                target=guard,
                request_id=guard.request_id,
                data={"status": guard.status, "pollers_restarted": restarted},
            )
    return bool(ended or restarted)


def guards_orphaned_finish(guards: QuerySet[ChangeGuard] | None = None) -> int:
    """End the unfinished rows whose site was removed from this service while they waited, then their guards.

    Nobody can answer for such a row: no site, so no poller. The beat's sweep runs it over
    every guard. Returns how many rows it ended.
    """
    rows = TaggedCheckpoint.objects.filter(
        site__isnull=True, status__in=TaggedCheckpoint.NOT_FINAL, guard__status__in=ChangeGuard.UNFINISHED
    ).select_related("guard")
    if guards is not None:
        rows = rows.filter(guard__in=guards)
    error = "the protected site was removed from this service while the checkpoint was pending"
    ended = rows_finish([RowEnd(row, TaggedCheckpoint.Status.FAILED, error) for row in rows[:500]])
    guards_finish({end.row.guard_id: end.row.guard for end in ended}.values())
    return len(ended)


def guard_insert_requeue(guard_id: int) -> str:
    """For wait messages queued before the pollers inserted: the guard is resumed like on a status read."""
    guard = ChangeGuard.objects.filter(pk=guard_id, status__in=ChangeGuard.UNFINISHED).first()
    if guard is None:
        return "skipped: finished or gone"
    guard_resume_if_stale(guard)
    sites = guard.vpgs.filter(site__isnull=False).values_list("site_id", flat=True).distinct()
    return f"handed to the poller of {sites.count()} site(s)"


def guard_read_and_resume(guard_id: int | str) -> ChangeGuard:
    """A guard by id, its sites' dead pollers restarted first (``guard_resume_if_stale``). Raises NotFoundError.

    Writes (the restart); a plain read is ``selectors.guard_get``.
    """
    try:
        guard = ChangeGuard.objects.get(pk=int(guard_id))
    except (ValueError, TypeError, ChangeGuard.DoesNotExist):
        raise NotFoundError(f"no guard with id {guard_id!r}") from None
    guard_resume_if_stale(guard)
    return guard


# -- guard before mutate -----------------------------------------------------------------


def vm_from_arguments(entry: MutatingTool, arguments: Mapping[str, Any]) -> str:
    """The VM named by the entry's ``vm_arg``; raises ApplicationError naming what is missing.

    The key is looked up exactly, then case-insensitively. ``user@host`` and ``host:port``
    are reduced to the host; a one-element list is its element; anything else is an error,
    never a silent pass.
    """
    key = entry.vm_arg
    if key not in arguments:
        key = next((k for k in arguments if str(k).lower() == entry.vm_arg.lower()), entry.vm_arg)
    value = arguments.get(key)
    if isinstance(value, (list, tuple)) and len(value) == 1:
        value = value[0]
    if value is None or (isinstance(value, str) and not value.strip()):
        raise ApplicationError(
            f"the catalog entry {entry.pattern!r} names the VM in argument {entry.vm_arg!r}, "
            f"which is missing from the arguments; the change must not proceed unguarded"
        )
    if not isinstance(value, str):
        raise ApplicationError(
            f"argument {entry.vm_arg!r} (catalog entry {entry.pattern!r}) must name one VM; guard each host separately"
        )
    return host_only(value.strip())


def host_only(value: str) -> str:
    """The host of ``user@host``, ``host:port`` or ``[ipv6]``: what names a VM in a tool argument."""
    host = value.rsplit("@", 1)[-1]
    if host.count(":") == 1:  # host:port; a bare IPv6 address has several colons
        name, port = host.split(":")
        if port.isdigit():
            host = name
    return host.strip("[]") or value


def guard_before_mutate(
    *,
    agent_name: str,
    agent_id: int | None = None,
    tool: str,
    arguments: Mapping[str, Any],
    action: str,
    change_id: str | None = None,
    timeout_s: int | float | None = None,
    request_id: str | None = None,
) -> GuardOutcome:
    """Guard a tool call: checkpoint every VPG of its VM if the catalog lists the tool.

    Unlisted tools pass through (audited ``guard.pass_through``, sighting recorded) with
    ``guarded`` False. Raises ApplicationError for a malformed tool name, empty action,
    non-object arguments or a listed tool whose VM argument is missing.
    """
    name = normalize_tool_name(tool)
    if not isinstance(arguments, Mapping):
        raise ApplicationError("arguments must be an object (the arguments of the tool you are about to call)")
    cleaned_action = clean_action(action)
    rid = request_id or current_request_id()
    entry = mutating_tool_match(name)
    if entry is not None and entry.decision == Decision.DENY:
        return _refuse_denied(agent_name, name, entry, cleaned_action, rid)
    if entry is None:
        with transaction.atomic():
            tool_sighting_record(tool=name, agent_name=agent_name, argument_names=[str(k) for k in arguments])
            audit_record(
                actor=Actor.agent(agent_name),
                action=GuardAction.PASS_THROUGH,
                target=("tool", name),
                request_id=rid,
                data={"tool": name, "action": cleaned_action, "argument_names": sorted(str(k) for k in arguments)},
            )
        return GuardOutcome(guarded=False)
    vm = vm_from_arguments(entry, arguments)
    outcome = guard_create(
        agent_name=agent_name,
        agent_id=agent_id,
        vm=vm,
        action=cleaned_action,
        change_id=change_id,
        tool=name,
        timeout_s=timeout_s,
        request_id=rid,
        decision=entry.decision,
        decision_reason=f"the catalog entry {entry.pattern} says {entry.decision}",
    )
    return GuardOutcome(
        guarded=True,
        guard=outcome.guard,
        created=outcome.created,
        refusal=outcome.refusal,
        refused=outcome.refused,
        entry=entry.pattern,
        vm=vm,
        change_id=outcome.change_id,
    )


def _refuse_denied(agent_name: str, tool: str, entry: MutatingTool, action: str, rid: str) -> GuardOutcome:
    """The catalog entry says deny: refused before any look-up, audited, nothing inserted."""
    reason = f"the catalog entry {entry.pattern} says deny: no call of {tool} may go ahead"
    with transaction.atomic():
        audit_record(
            actor=Actor.agent(agent_name),
            action=GuardAction.REFUSED,
            target=("tool", tool),
            request_id=rid,
            data={"tool": tool, "action": action, "reason": reason, "entry": entry.pattern, "decision": entry.decision},
        )
    return GuardOutcome(guarded=True, refusal=reason, entry=entry.pattern)
