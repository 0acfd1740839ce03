"""The policy: every change of a decision raises its version; VM rules and an agent's setting raise a
guard to ``approve``; stops per agent and per VM refuse only what they cover; only people change any of it."""

from __future__ import annotations

from typing import Any

import pytest

from catalog.services import mutating_tool_add
from rewind.agents.services import agent_update
from rewind.audit import Actor
from rewind.checkpoints.services import guard_before_mutate, guard_create
from rewind.lib.errors import PermissionDeniedError
from rewind.models import Agent, AuditEvent, ChangeGuard
from rewind.policy.selectors import policy_version
from rewind.policy.services import approval_rule_add, stop_engage, stop_lift

ALICE = Actor.user("alice")


@pytest.fixture
def agents(fixer: Agent) -> tuple[Agent, Agent]:
    other = Agent.objects.create(name="other", owner=fixer.owner)
    return fixer, other


def test_every_change_of_a_decision_raises_the_version_audited(sites: Any, agents: tuple[Agent, Agent]) -> None:
    fixer, _other = agents
    start = policy_version()
    mutating_tool_add(actor=ALICE, pattern="ops/exec", vm_arg="host", description="ops", decision="approve")
    approval_rule_add(actor=ALICE, kind="vpg", value="vpg-db", note="the database")
    agent_update(actor=ALICE, agent=fixer, changes_need_approval=True)
    assert policy_version() == start + 3
    raised = AuditEvent.objects.filter(action="policy.version.raised").order_by("pk")
    assert [e.data["version"] for e in raised][-3:] == [start + 1, start + 2, start + 3]


def test_only_people_change_rules_and_stops(db: None) -> None:
    for change in (
        lambda: approval_rule_add(actor=Actor.agent("fixer"), kind="vm_name", value="db*"),
        lambda: stop_engage(actor=Actor.agent("fixer"), scope="everywhere", reason="mine"),
    ):
        with pytest.raises(PermissionDeniedError):
            change()


def test_a_vm_rule_and_the_agents_setting_raise_a_checkpoint_to_approve(
    sites: Any, agents: tuple[Agent, Agent]
) -> None:
    fixer, other = agents
    approval_rule_add(actor=ALICE, kind="vm_name", value="WEB*", note="the web tier")
    ruled = guard_create(agent_name=fixer.name, agent_id=fixer.pk, vm="web01", action="edit", change_id="c1")
    assert ruled.guard is not None
    assert ruled.guard.decision == "approve"
    assert "VM rule VM name WEB* (the web tier)" in ruled.guard.decision_reason
    assert ruled.guard.policy_version == policy_version()
    plain = guard_create(agent_name=other.name, agent_id=other.pk, vm="db01", action="edit", change_id="c2")
    assert plain.guard is not None
    assert plain.guard.decision == "checkpoint"
    agent_update(actor=ALICE, agent=other, changes_need_approval=True)
    now = guard_create(agent_name=other.name, agent_id=other.pk, vm="db01", action="edit", change_id="c3")
    assert now.guard is not None
    assert now.guard.decision == "approve"
    assert "every change of agent other needs a person" in now.guard.decision_reason


def test_a_catalog_entry_that_says_deny_refuses_before_any_checkpoint(sites: Any, fixer: Agent) -> None:
    mutating_tool_add(actor=ALICE, pattern="ops/rm", vm_arg="host", description="rm", decision="deny")
    outcome = guard_before_mutate(
        agent_name=fixer.name, agent_id=fixer.pk, tool="ops/rm", arguments={"host": "web01"}, action="rm"
    )
    assert outcome.guard is None
    assert "says deny" in (outcome.refusal or "")
    assert not ChangeGuard.objects.exists()


def test_a_stop_of_one_agent_or_one_vm_refuses_only_what_it_covers(sites: Any, agents: tuple[Agent, Agent]) -> None:
    fixer, other = agents
    by_agent = stop_engage(actor=ALICE, scope="agent", agent_id=fixer.pk, reason="it loops")
    refused = guard_create(agent_name=fixer.name, agent_id=fixer.pk, vm="web01", action="edit", change_id="a")
    assert refused.guard is None
    assert "of agent fixer is stopped by alice" in (refused.refusal or "")
    assert "it loops" in (refused.refusal or "")
    assert guard_create(agent_name=other.name, agent_id=other.pk, vm="web01", action="edit", change_id="b").guard
    stop_lift(actor=ALICE, stop=by_agent)
    stop_engage(actor=ALICE, scope="vm", vm="WEB01", reason="month-end")
    on_vm = guard_create(agent_name=other.name, agent_id=other.pk, vm="web01", action="edit", change_id="c")
    assert on_vm.guard is None
    assert "of VM WEB01" in (on_vm.refusal or "")
    assert guard_create(agent_name=fixer.name, agent_id=fixer.pk, vm="db01", action="edit", change_id="d").guard
