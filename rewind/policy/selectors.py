"""Reads of the policy: its version, the VM rules a VM matches, and the stops in force (database reads only)."""

from __future__ import annotations

import fnmatch
import functools
from collections.abc import Iterable
from dataclasses import dataclass

from django.db import connection

from rewind.policy.models import DECISION_ORDER, ApprovalRule, Decision, PolicyVersion, StopSwitch


def policy_version_sql() -> str:
    """A scalar subquery of the policy's version, 0 before any change: for a statement a call runs
    anyway, so reading it costs no query of its own."""
    table = connection.ops.quote_name(PolicyVersion._meta.db_table)
    return f"COALESCE((SELECT n FROM {table} WHERE id = 1), 0)"


def stops_in_force_sql() -> str:
    """A scalar subquery: how many stops are in force (0 on almost every call: then nothing more is read)."""
    table = connection.ops.quote_name(StopSwitch._meta.db_table)
    return f"(SELECT COUNT(*) FROM {table} WHERE lifted_at IS NULL)"


@functools.cache
def _state_sql() -> str:
    return f"SELECT {policy_version_sql()}, {stops_in_force_sql()}"


@dataclass(frozen=True)
class PolicyState:
    version: int
    stops_in_force: int


def policy_state() -> PolicyState:
    """The policy's version and the number of stops in force, in one statement."""
    with connection.cursor() as cursor:
        cursor.execute(_state_sql())
        version, stops = cursor.fetchone()
    return PolicyState(int(version), int(stops))


def policy_version() -> int:
    return policy_state().version


def policy_version_row() -> PolicyVersion:
    """The version with who changed it last (a fresh install: version 0, changed by nobody)."""
    return PolicyVersion.objects.filter(pk=1).first() or PolicyVersion(pk=1)


def stops_in_force() -> list[StopSwitch]:
    return list(StopSwitch.objects.filter(lifted_at__isnull=True).order_by("stopped_at", "pk"))


def stop_list(*, in_force: bool | None = None) -> list[StopSwitch]:
    qs = StopSwitch.objects.all()
    if in_force is not None:
        qs = qs.filter(lifted_at__isnull=in_force)
    return list(qs.order_by("-stopped_at", "-pk")[:500])


def stop_get(pk: int) -> StopSwitch | None:
    return StopSwitch.objects.filter(pk=pk).first()


def stop_matching(
    stops: Iterable[StopSwitch], *, agent_id: int | None, agent_name: str, vms: Iterable[str] = ()
) -> StopSwitch | None:
    """The first stop in force that covers this agent or one of these VMs (names, any case), else None."""
    names = {v.strip().lower() for v in vms if v and v.strip()}
    for stop in stops:
        if not stop.active:
            continue
        if stop.scope == StopSwitch.Scope.EVERYWHERE:
            return stop
        if stop.scope == StopSwitch.Scope.AGENT and (
            (agent_id is not None and stop.agent_id == agent_id) or stop.agent_name == agent_name
        ):
            return stop
        if stop.scope == StopSwitch.Scope.VM and stop.vm.strip().lower() in names:
            return stop
    return None


def stop_refusal_text(stop: StopSwitch) -> str:
    """What a refused guard or call says: which stop, who engaged it, when and why."""
    return (
        f"STOPPED: every guarded change {stop.what} is stopped by {stop.stopped_by} since "
        f"{stop.stopped_at:%Y-%m-%d %H:%M:%S} UTC: {stop.reason}. Nothing was changed; only a person can lift "
        "the stop (admin: Stop switches), no tool can. Report this to the user; do not retry"
    )


def stop_refusal(*, agent_id: int | None, agent_name: str, vms: Iterable[str] = ()) -> str | None:
    """Why a stop in force refuses this agent's change to ``vms``, or None; one query when no stop is in force."""
    if policy_state().stops_in_force == 0:
        return None
    stop = stop_matching(stops_in_force(), agent_id=agent_id, agent_name=agent_name, vms=vms)
    return stop_refusal_text(stop) if stop is not None else None


def approval_rule_list() -> list[ApprovalRule]:
    return list(ApprovalRule.objects.order_by("kind", "value"))


def approval_rules_matching(*, vm_name: str, vpgs: Iterable[str], sites: Iterable[str]) -> list[ApprovalRule]:
    """The enabled VM rules that match: the VM's name (pattern), one of its VPGs, or one of their protected sites."""
    vm = vm_name.lower()
    vpg_names = {v.lower() for v in vpgs if v}
    site_names = {s.lower() for s in sites if s}
    found = []
    for rule in ApprovalRule.objects.filter(enabled=True).order_by("kind", "value"):
        value = rule.value.lower()
        if (
            (rule.kind == ApprovalRule.Kind.VM_NAME and fnmatch.fnmatchcase(vm, value))
            or (rule.kind == ApprovalRule.Kind.VPG and value in vpg_names)
            or (rule.kind == ApprovalRule.Kind.SITE and value in site_names)
        ):
            found.append(rule)
    return found


@dataclass(frozen=True)
class Decided:
    """A change's decision, why, and the policy version it was made under."""

    decision: str
    reasons: tuple[str, ...]
    version: int

    @property
    def needs_person(self) -> bool:
        return self.decision == Decision.APPROVE

    @property
    def reason(self) -> str:
        return "; ".join(self.reasons)


def stricter(a: str, b: str) -> str:
    return a if DECISION_ORDER.index(Decision(a)) >= DECISION_ORDER.index(Decision(b)) else b


def decision_for_vm(
    base: str,
    *,
    base_reason: str,
    vm_name: str,
    vpgs: Iterable[str],
    sites: Iterable[str],
    agent_needs_person: bool,
    agent_name: str,
) -> Decided:
    """``base`` (an entry's or a tool policy's decision) raised by the VM rules and the agent's setting.

    A rule only raises ``checkpoint`` to ``approve``; ``deny`` stays ``deny``. Reads the version first,
    so a change committed while deciding shows as a newer version at release, never as an older one.
    """
    version = policy_version()
    decision, reasons = Decision(base), [base_reason] if base_reason else []
    rules = approval_rules_matching(vm_name=vm_name, vpgs=list(vpgs), sites=list(sites))
    for rule in rules:
        reasons.append(f"VM rule {rule}" + (f" ({rule.note})" if rule.note else ""))
    if agent_needs_person:
        reasons.append(f"every change of agent {agent_name} needs a person")
    if decision == Decision.CHECKPOINT and (rules or agent_needs_person):
        decision = Decision.APPROVE
    return Decided(decision, tuple(reasons), version)
