"""The catalog admin: edits go through the services (audited), sightings are classified by actions."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from catalog.models import MutatingTool, ToolSighting
from catalog.services import tool_sighting_record
from rewind.models import AuditEvent

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client() -> Client:
    User.objects.create_superuser("alice", password="alice-pw-123")
    client = Client()
    client.login(username="alice", password="alice-pw-123")
    return client


def test_adding_an_entry_in_the_admin_is_audited_as_the_user(admin_client: Client) -> None:
    resp = admin_client.post(
        "/admin/catalog/mutatingtool/add/",
        {
            "pattern": "Kubectl/*",
            "vm_arg": "node",
            "platform": "linux",
            "description": "kubectl on a node",
            "enabled": "on",
        },
    )
    assert resp.status_code == 302, resp.content
    tool = MutatingTool.objects.get(pattern="kubectl/*")
    assert tool.added_by == "alice"
    assert tool.added_by_kind == "user"
    assert AuditEvent.objects.get(action="catalog.tool.added").actor == "alice"


def test_a_malformed_entry_is_shown_as_a_form_error(admin_client: Client) -> None:
    resp = admin_client.post(
        "/admin/catalog/mutatingtool/add/",
        {
            "pattern": "not a tool",
            "vm_arg": "host",
            "platform": "any",
            "description": "x",
            "enabled": "on",
        },
    )
    assert resp.status_code == 200
    assert b"is not a catalog entry" in resp.content
    assert not AuditEvent.objects.exists()


def test_changing_and_deleting_in_the_admin_go_through_the_services(admin_client: Client) -> None:
    tool = MutatingTool.objects.get(pattern="smb/write_file")
    resp = admin_client.post(
        f"/admin/catalog/mutatingtool/{tool.pk}/change/",
        {
            "vm_arg": "server",
            "platform": "windows",
            "description": tool.description,
        },
    )
    assert resp.status_code == 302, resp.content
    tool.refresh_from_db()
    assert tool.vm_arg == "server"
    assert not tool.enabled
    changed = AuditEvent.objects.get(action="catalog.tool.changed")
    assert changed.data["after"]["vm_arg"] == "server"
    assert changed.data["after"]["enabled"] is False
    resp = admin_client.post(f"/admin/catalog/mutatingtool/{tool.pk}/delete/", {"post": "yes"})
    assert resp.status_code == 302
    assert AuditEvent.objects.get(action="catalog.tool.removed").data["before"]["pattern"] == "smb/write_file"


def test_classifying_a_sighting_as_mutating_asks_for_the_vm_argument(admin_client: Client) -> None:
    s = tool_sighting_record(tool="docker/exec", agent_name="ops-bot", argument_names=["docker_host", "cmd"])
    url = "/admin/catalog/toolsighting/"
    first = admin_client.post(url, {"action": "classify_mutating", "_selected_action": [s.pk]})
    assert first.status_code == 200
    assert b"docker_host" in first.content
    assert b"Add to the catalog" in first.content
    missing = admin_client.post(
        url,
        {
            "action": "classify_mutating",
            "_selected_action": [s.pk],
            "apply": "1",
            f"s{s.pk}-platform": "linux",
            f"s{s.pk}-description": "docker",
        },
    )
    assert missing.status_code == 200
    assert b"choose the argument" in missing.content
    done = admin_client.post(
        url,
        {
            "action": "classify_mutating",
            "_selected_action": [s.pk],
            "apply": "1",
            f"s{s.pk}-vm_arg": "docker_host",
            f"s{s.pk}-platform": "linux",
            f"s{s.pk}-description": "docker exec on a host",
        },
    )
    assert done.status_code == 302
    entry = MutatingTool.objects.get(pattern="docker/exec")
    assert entry.vm_arg == "docker_host"
    assert entry.added_by == "alice"
    assert ToolSighting.objects.get(pk=s.pk).status == ToolSighting.Status.ADDED


def test_classifying_a_sighting_as_read_only_ignores_it(admin_client: Client) -> None:
    s = tool_sighting_record(tool="fs/list", agent_name="ops-bot", argument_names=["path"])
    body = {"action": "classify_readonly", "_selected_action": [s.pk]}
    resp = admin_client.post("/admin/catalog/toolsighting/", body)
    assert resp.status_code == 302
    assert ToolSighting.objects.get(pk=s.pk).status == ToolSighting.Status.IGNORED
    assert AuditEvent.objects.get(action="catalog.sighting.classified_readonly").actor == "alice"


def test_the_guard_admin_is_read_only_and_filterable(admin_client: Client) -> None:
    resp = admin_client.get("/admin/rewind/changeguard/?status=ok&agent_name=ops-bot")
    assert resp.status_code == 200
    assert admin_client.get("/admin/rewind/changeguard/add/").status_code == 403


def test_an_unusable_vm_argument_is_shown_as_a_form_error(admin_client: Client) -> None:
    resp = admin_client.post(
        "/admin/catalog/mutatingtool/add/",
        {
            "pattern": "x/y",
            "vm_arg": "two words",
            "platform": "any",
            "description": "x",
            "enabled": "on",
        },
    )
    assert resp.status_code == 200
    assert b"is not an argument name" in resp.content
    assert not MutatingTool.objects.filter(pattern="x/y").exists()
