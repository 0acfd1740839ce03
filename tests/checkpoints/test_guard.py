"""guard_before_mutate and the tag: catalog lookup, VM argument, pass-through, tag rules."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from catalog.models import MutatingTool, ToolSighting
from catalog.services import mutating_tool_add, mutating_tool_disable
from rewind.audit import Actor
from rewind.checkpoints.services import guard_before_mutate, vm_from_arguments
from rewind.checkpoints.tags import build_tag, clean_action, clean_change_id
from rewind.lib.errors import ApplicationError
from rewind.models import AuditEvent, ChangeGuard

NOW = datetime(2026, 11, 29, 10, 15, 42, 123456, tzinfo=UTC)


def test_the_tag_has_the_documented_form() -> None:
    tag = build_tag(agent="ops-bot", action=clean_action("edit nginx.conf"), vm="web01", change_id="CHG-1", now=NOW)
    assert tag == "ai:ops-bot | edit nginx.conf | vm=web01 | change=CHG-1 | 2026-11-29T10:15:42Z"


def test_pipes_and_control_characters_are_stripped_from_the_action() -> None:
    assert clean_action("rm | tee\x00 /etc/x\r\n\tnow\u202e") == "rm tee /etc/x now"
    with pytest.raises(ApplicationError, match="action"):
        clean_action(" |\x07| ")


def test_a_long_action_is_shortened_to_the_limit(settings: Any) -> None:
    settings.REWIND_TAG_MAX_LENGTH = 100
    tag = build_tag(agent="ops-bot", action=clean_action("x" * 150), vm="web01", change_id="CHG-1", now=NOW)
    assert len(tag) == 100
    assert tag.startswith("ai:ops-bot | xxx")
    assert "... | vm=web01 | change=CHG-1 | 2026-11-29T10:15:42Z" in tag
    with pytest.raises(ApplicationError, match="shorter change_id"):
        build_tag(agent="ops-bot", action="x", vm="web01", change_id="C" * 90, now=NOW)


def test_change_ids_are_generated_or_checked() -> None:
    assert clean_change_id(None).startswith("chg-")
    assert clean_change_id(None) != clean_change_id("")
    assert clean_change_id(" JIRA-12 ") == "JIRA-12"
    for bad in ("a|b", "a b", "x\x00", "y" * 101):
        with pytest.raises(ApplicationError, match="change_id"):
            clean_change_id(bad)


@pytest.mark.parametrize(
    ("arguments", "vm"),
    [
        ({"host": "web01"}, "web01"),
        ({"host": "root@web01:22"}, "web01"),
        ({"HOST": "web01.corp"}, "web01.corp"),
        ({"host": ["db01"]}, "db01"),
        ({"host": "10.0.0.12"}, "10.0.0.12"),
    ],
)
def test_the_vm_is_read_from_the_entry_s_argument(db: None, arguments: dict[str, Any], vm: str) -> None:
    assert vm_from_arguments(MutatingTool.objects.get(pattern="ssh/exec"), arguments) == vm


@pytest.mark.parametrize("arguments", [{}, {"host": ""}, {"host": None}, {"hostname": "web01"}])
def test_a_missing_vm_argument_names_the_entry_and_the_argument(db: None, arguments: dict[str, Any]) -> None:
    with pytest.raises(ApplicationError, match="'ssh/exec' names the VM in argument 'host', which is missing"):
        guard_before_mutate(agent_name="ops-bot", tool="ssh/exec", arguments=arguments, action="edit")
    assert not ChangeGuard.objects.exists()
    assert not ToolSighting.objects.exists()


def test_several_hosts_in_one_argument_are_refused(db: None) -> None:
    with pytest.raises(ApplicationError, match="guard each host separately"):
        guard_before_mutate(
            agent_name="ops-bot", tool="ansible/run_playbook", arguments={"hosts": ["a", "b"]}, action="x"
        )


@pytest.mark.parametrize("tool", ["ssh", "ssh/exec/now", "ssh exec", "", "ssh/*"])
def test_a_malformed_tool_name_is_an_error(db: None, tool: str) -> None:
    with pytest.raises(ApplicationError, match="not a tool name"):
        guard_before_mutate(agent_name="ops-bot", tool=tool, arguments={"host": "web01"}, action="edit")
    assert not AuditEvent.objects.exists()


def test_an_unlisted_tool_passes_through_audited_with_a_sighting(db: None) -> None:
    arguments = {"path": "/etc/passwd", "token": "s3cr3t"}
    outcome = guard_before_mutate(agent_name="ops-bot", tool="fs/read_file", arguments=arguments, action="read")
    assert outcome.guarded is False
    assert outcome.guard is None
    event = AuditEvent.objects.get(action="guard.pass_through")
    assert event.actor == "ops-bot"
    assert event.data["tool"] == "fs/read_file"
    assert "s3cr3t" not in str(event.data)  # argument names only, never values
    assert ToolSighting.objects.get(tool="fs/read_file").argument_names == ["path", "token"]


def test_a_disabled_entry_passes_through(db: None) -> None:
    mutating_tool_disable(actor=Actor.user("alice"), tool=MutatingTool.objects.get(pattern="smb/write_file"))
    outcome = guard_before_mutate(agent_name="ops-bot", tool="smb/write_file", arguments={"host": "win01"}, action="x")
    assert outcome.guarded is False


def test_a_listed_tool_is_guarded_through_a_pattern(sim: Any, sites: Any, db: None) -> None:
    mutating_tool_add(actor=Actor.agent("ops-bot"), pattern="docker/*", vm_arg="node", description="docker")
    outcome = guard_before_mutate(
        agent_name="ops-bot", tool="Docker/Run", arguments={"node": "db01"}, action="restart db", change_id="CHG-9"
    )
    assert outcome.guarded
    assert outcome.created
    assert outcome.entry == "docker/*"
    guard = outcome.guard
    assert guard is not None
    assert guard.tool == "docker/run"
    assert guard.vm_name == "db01"
    assert guard.change_id == "CHG-9"
    assert [r.vpg_name for r in guard.vpgs.all()] == ["vpg-db"]
    assert AuditEvent.objects.get(action="guard.created").data["tool"] == "docker/run"


def test_another_agent_cannot_reuse_a_change_id_for_the_same_vm(sim: Any, sites: Any, db: None) -> None:
    guard_before_mutate(agent_name="ops-bot", tool="ssh/exec", arguments={"host": "db01"}, action="x", change_id="C-1")
    with pytest.raises(ApplicationError, match="already in use"):
        guard_before_mutate(agent_name="gpt", tool="ssh/exec", arguments={"host": "db01"}, action="x", change_id="C-1")


def test_the_cheap_progress_read_agrees_with_the_full_one(db: None) -> None:
    from rewind.checkpoints.selectors import guard_progress, guard_tallies, guard_tally
    from rewind.models import TaggedCheckpoint

    guard = ChangeGuard.objects.create(
        agent_name="a", action="x", vm_identifier="vm-1", vm_name="web01", change_id="c-1", tag="t", timeout_s=120
    )
    for n, status in enumerate(["listed", "pending", "listed", "failed"]):
        TaggedCheckpoint.objects.create(guard=guard, vpg_identifier=f"vpg-{n}", vpg_name=f"VPG {n}", status=status)
    full, tally = guard_progress(guard.pk), guard_tally(guard.pk)
    assert (tally.status, tally.listed, tally.total, tally.deadline) == (full.status, 2, 4, full.deadline)
    assert tally.waiting_for is None
    assert guard_tally(guard.pk + 1000).status == ""  # no such guard: as guard_progress says
    bare = ChangeGuard.objects.create(
        agent_name="a", action="x", vm_identifier="vm-2", vm_name="web02", change_id="c-2", tag="t", timeout_s=60
    )
    full, tally = guard_progress(bare.pk), guard_tally(bare.pk)
    assert (tally.status, tally.listed, tally.total, tally.deadline) == (full.status, 0, 0, bare.deadline)
    together = guard_tallies([guard.pk, bare.pk, bare.pk + 1000])  # one statement for them all
    assert together == {guard.pk: guard_tally(guard.pk), bare.pk: tally, bare.pk + 1000: guard_tally(bare.pk + 1000)}
