"""The mutating-tool catalog: entries, matching, sightings, permissions and audit."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from catalog.models import MutatingTool, ToolSighting
from catalog.services import (
    mutating_tool_add,
    mutating_tool_disable,
    mutating_tool_match,
    mutating_tool_remove,
    mutating_tool_update,
    tool_sighting_classify_mutating,
    tool_sighting_classify_readonly,
    tool_sighting_count,
    tool_sighting_record,
)
from rewind.audit import Actor, verify_chain
from rewind.lib.errors import ApplicationError, PermissionDeniedError
from rewind.models import AuditEvent

pytestmark = pytest.mark.django_db

ALICE = Actor.user("alice")
BOT = Actor.agent("ops-bot")


def test_the_starter_list_covers_linux_and_windows() -> None:
    entries = {t.pattern: (t.vm_arg, t.platform) for t in MutatingTool.objects.all()}
    assert entries == {
        "ssh/exec": ("host", "linux"),
        "ansible/run_playbook": ("hosts", "linux"),
        "winrm/run_command": ("host", "windows"),
        "winrm/run_ps": ("host", "windows"),
        "powershell/invoke_command": ("computer_name", "windows"),
        "smb/write_file": ("host", "windows"),
    }


def test_an_agent_adds_an_entry_and_it_is_audited() -> None:
    tool = mutating_tool_add(
        actor=BOT, pattern=" Docker/Exec ", vm_arg="host", platform="linux", description="runs in a container"
    )
    assert tool.pattern == "docker/exec"
    assert tool.added_by == "ops-bot"
    assert tool.added_by_kind == "agent"
    event = AuditEvent.objects.get(action="catalog.tool.added")
    assert event.actor == "ops-bot"
    assert event.actor_type == "agent"
    assert event.data["before"] is None
    assert event.data["after"]["pattern"] == "docker/exec"
    assert verify_chain()[1] is None


@pytest.mark.parametrize(
    "pattern", ["ssh", "ssh/", "/exec", "ssh/exec/x", "ssh/ex ec", "*/exec", "ssh/ex*", "ssh|x/y", ""]
)
def test_it_rejects_malformed_entries(pattern: str) -> None:
    with pytest.raises(ApplicationError, match="not a catalog entry"):
        mutating_tool_add(actor=BOT, pattern=pattern, vm_arg="host", description="x")
    assert not AuditEvent.objects.exists()


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"vm_arg": ""}, "vm_arg"),
        ({"vm_arg": "a b"}, "vm_arg"),
        ({"platform": "mac"}, "platform"),
        ({"description": " "}, "description"),
    ],
)
def test_it_rejects_bad_fields(fields: dict[str, str], message: str) -> None:
    args = {"pattern": "x/y", "vm_arg": "host", "platform": "any", "description": "d", **fields}
    with pytest.raises(ApplicationError, match=message):
        mutating_tool_add(actor=BOT, **args)
    assert not MutatingTool.objects.filter(pattern="x/y").exists()


def test_a_second_entry_for_the_same_tool_is_refused() -> None:
    with pytest.raises(ApplicationError, match="already has an entry 'ssh/exec'"):
        mutating_tool_add(actor=BOT, pattern="SSH/exec", vm_arg="host", description="again")


def _matched(tool: str) -> str | None:
    """The pattern of the catalog entry that ``tool`` matches, if any."""
    entry = mutating_tool_match(tool)
    return entry.pattern if entry is not None else None


def test_an_exact_entry_beats_a_pattern_and_disabled_entries_do_not_match() -> None:
    mutating_tool_add(actor=BOT, pattern="winrm/*", vm_arg="computer", description="all of winrm")
    assert _matched("winrm/run_ps") == "winrm/run_ps"
    assert _matched("winrm/copy_file") == "winrm/*"
    mutating_tool_disable(actor=ALICE, tool=MutatingTool.objects.get(pattern="winrm/run_ps"))
    assert _matched("winrm/run_ps") == "winrm/*"
    mutating_tool_disable(actor=ALICE, tool=MutatingTool.objects.get(pattern="winrm/*"))
    assert mutating_tool_match("winrm/run_ps") is None
    assert mutating_tool_match("ssh/list") is None


@pytest.mark.parametrize("change", ["update", "disable", "remove"])
def test_only_people_change_disable_or_remove_entries(change: str) -> None:
    tool = MutatingTool.objects.get(pattern="ssh/exec")
    attempts = {
        "update": lambda: mutating_tool_update(actor=BOT, tool=tool, vm_arg="target"),
        "disable": lambda: mutating_tool_disable(actor=BOT, tool=tool),
        "remove": lambda: mutating_tool_remove(actor=BOT, tool=tool),
    }
    with pytest.raises(PermissionDeniedError, match="only a person"):
        attempts[change]()
    tool.refresh_from_db()
    assert tool.enabled
    assert tool.vm_arg == "host"
    assert not AuditEvent.objects.exists()


def test_a_person_updates_and_removes_with_before_and_after_audited() -> None:
    tool = MutatingTool.objects.get(pattern="ssh/exec")
    mutating_tool_update(actor=ALICE, tool=tool, vm_arg="hostname", enabled=False)
    changed = AuditEvent.objects.get(action="catalog.tool.changed")
    assert changed.actor == "alice"
    assert (changed.data["before"]["vm_arg"], changed.data["after"]["vm_arg"]) == ("host", "hostname")
    assert (changed.data["before"]["enabled"], changed.data["after"]["enabled"]) == (True, False)
    mutating_tool_remove(actor=ALICE, tool=tool)
    removed = AuditEvent.objects.get(action="catalog.tool.removed")
    assert removed.data["before"]["pattern"] == "ssh/exec"
    assert removed.data["after"] is None
    assert not MutatingTool.objects.filter(pattern="ssh/exec").exists()


def test_a_forwarded_call_counts_in_one_statement_once_its_names_are_merged_and_never_loses_one() -> None:
    def count(agent: str, names: list[str]) -> int:
        with CaptureQueriesContext(connection) as queries:
            tool_sighting_count(tool="FS/exec", agent_name=agent, argument_names=names)
        return len(queries)

    assert count("ops-bot", ["cmd", "host"]) > 1  # first seen here: read, merged, written
    first = ToolSighting.objects.get(tool="fs/exec")
    assert count("ops-bot", ["host", "cmd"]) == 1  # the same names: counted in one UPDATE
    assert count("gpt", ["host"]) > 1  # another agent: merged
    assert count("ops-bot", ["host", "cmd", "timeout"]) > 1  # a new argument name: merged
    s = ToolSighting.objects.get(tool="fs/exec")
    assert s.count == 4
    assert s.agents == ["ops-bot", "gpt"]
    assert s.argument_names == ["cmd", "host", "timeout"]
    assert s.last_seen_at >= first.last_seen_at
    s.delete()  # a person removed it: the next call sights it anew, with its names
    assert count("ops-bot", ["host", "cmd"]) > 1
    again = ToolSighting.objects.get(tool="fs/exec")
    assert (again.count, again.agents, again.argument_names) == (1, ["ops-bot"], ["cmd", "host"])


def test_sightings_count_calls_agents_and_argument_names() -> None:
    tool_sighting_record(tool="FS/read_file", agent_name="ops-bot", argument_names=["path"])
    tool_sighting_record(tool="fs/read_file", agent_name="gpt", argument_names=["path", "encoding"])
    tool_sighting_record(tool="fs/read_file", agent_name="ops-bot", argument_names=[])
    s = ToolSighting.objects.get(tool="fs/read_file")
    assert s.count == 3
    assert s.agents == ["ops-bot", "gpt"]
    assert s.argument_names == ["path", "encoding"]
    assert s.status == ToolSighting.Status.UNCLASSIFIED
    assert s.last_seen_at >= s.first_seen_at


def test_classifying_a_sighting_as_mutating_adds_it_to_the_catalog() -> None:
    s = tool_sighting_record(tool="docker/exec", agent_name="ops-bot", argument_names=["container_host", "cmd"])
    with pytest.raises(PermissionDeniedError):
        tool_sighting_classify_mutating(actor=BOT, sighting=s, vm_arg="container_host")
    entry = tool_sighting_classify_mutating(actor=ALICE, sighting=s, vm_arg="container_host", platform="linux")
    assert entry.pattern == "docker/exec"
    assert entry.vm_arg == "container_host"
    assert entry.added_by == "alice"
    s.refresh_from_db()
    assert s.status == ToolSighting.Status.ADDED
    assert s.classified_by == "alice"
    assert mutating_tool_match("docker/exec") == entry
    actions = set(AuditEvent.objects.values_list("action", flat=True))
    # Adding an entry changes how calls are decided: the policy's version goes up with it.
    assert actions == {"catalog.tool.added", "catalog.sighting.classified_mutating", "policy.version.raised"}


def test_classifying_a_sighting_as_read_only_ignores_it() -> None:
    s = tool_sighting_record(tool="fs/list", agent_name="ops-bot", argument_names=["path"])
    tool_sighting_classify_readonly(actor=ALICE, sighting=s)
    s.refresh_from_db()
    assert s.status == ToolSighting.Status.IGNORED
    assert mutating_tool_match("fs/list") is None
    event = AuditEvent.objects.get(action="catalog.sighting.classified_readonly")
    assert event.data["before"]["status"] == "unclassified"
    assert event.data["after"]["status"] == "ignored"
