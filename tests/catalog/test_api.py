"""/api/catalog/: entries added, changed and disabled by people through the services; sightings classified."""

from __future__ import annotations

from typing import Any

import pytest

from catalog.models import MutatingTool, ToolSighting
from catalog.services import tool_sighting_record
from rewind.models import AuditEvent

NEW = {"pattern": "Ansible/Run", "vm_arg": "target", "platform": "linux", "description": "runs a playbook"}


def _events(action: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action=action))


@pytest.fixture
def entry(api: Any, superuser: Any) -> tuple[Any, dict[str, Any]]:
    client = api(superuser)
    response = client.post("/api/catalog/tools/", NEW)
    assert response.status_code == 201, response.content
    return client, response.json()


@pytest.mark.django_db
def test_a_person_adds_an_entry_and_it_is_audited_as_them(entry: tuple[Any, dict[str, Any]]) -> None:
    _, body = entry
    assert body["pattern"] == "ansible/run"
    assert body["added_by"] == "root"
    assert body["added_by_kind"] == "user"
    [event] = _events("catalog.tool.added")
    assert (event.actor_type, event.actor, event.target_id) == ("user", "root", str(body["id"]))
    assert event.data["after"]["vm_arg"] == "target"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("change", "fields"),
    [
        ({"pattern": "no-slash"}, {"pattern"}),
        ({"pattern": "ssh/ex ec"}, {"pattern"}),
        ({"vm_arg": "1bad arg"}, {"vm_arg"}),
        ({"platform": "bsd"}, {"platform"}),
        ({"description": ""}, {"description"}),
    ],
)
def test_it_rejects_bad_entries_with_field_errors(
    api: Any, superuser: Any, change: dict[str, str], fields: set[str]
) -> None:
    response = api(superuser).post("/api/catalog/tools/", {**NEW, **change})
    assert response.status_code == 400
    assert set(response.json()) == fields
    assert not MutatingTool.objects.filter(pattern="ansible/run").exists()
    assert not _events("catalog.tool.added")


@pytest.mark.django_db
def test_it_refuses_a_duplicate_whatever_its_case(entry: tuple[Any, dict[str, Any]]) -> None:
    client, _ = entry
    response = client.post("/api/catalog/tools/", {**NEW, "pattern": "ANSIBLE/run"})
    assert response.status_code == 400
    assert "already" in response.json()["pattern"][0]


@pytest.mark.django_db
def test_a_person_updates_an_entry_and_the_before_and_after_are_audited(entry: tuple[Any, dict[str, Any]]) -> None:
    client, body = entry
    response = client.patch(f"/api/catalog/tools/{body['id']}/", {"vm_arg": "hosts", "platform": "any"})
    assert response.status_code == 200, response.content
    assert response.json()["vm_arg"] == "hosts"
    [event] = _events("catalog.tool.changed")
    assert event.actor == "root"
    assert (event.data["before"]["vm_arg"], event.data["after"]["vm_arg"]) == ("target", "hosts")


@pytest.mark.django_db
def test_the_pattern_cannot_change(entry: tuple[Any, dict[str, Any]]) -> None:
    client, body = entry
    response = client.patch(f"/api/catalog/tools/{body['id']}/", {"pattern": "ssh/*"})
    assert response.status_code == 400
    assert set(response.json()) == {"pattern"}
    assert MutatingTool.objects.get(pk=body["id"]).pattern == "ansible/run"


@pytest.mark.django_db
def test_disabling_is_audited_and_harmless_to_repeat(entry: tuple[Any, dict[str, Any]]) -> None:
    client, body = entry
    url = f"/api/catalog/tools/{body['id']}/disable/"
    assert client.post(url).json()["enabled"] is False
    assert client.post(url).status_code == 200
    assert len(_events("catalog.tool.changed")) == 1
    assert body["id"] not in [t["id"] for t in client.get("/api/catalog/tools/", {"enabled": "true"}).json()["results"]]
    assert body["id"] in [t["id"] for t in client.get("/api/catalog/tools/", {"enabled": "false"}).json()["results"]]


@pytest.mark.django_db
def test_a_viewer_reads_but_may_not_change_the_catalog(
    entry: tuple[Any, dict[str, Any]], api: Any, viewer: Any
) -> None:
    _, body = entry
    client = api(viewer)
    assert client.get(f"/api/catalog/tools/{body['id']}/").json()["pattern"] == "ansible/run"
    assert client.patch(f"/api/catalog/tools/{body['id']}/", {"enabled": False}).status_code == 403
    assert client.post(f"/api/catalog/tools/{body['id']}/disable/").status_code == 403
    assert MutatingTool.objects.get(pk=body["id"]).enabled is True


@pytest.mark.django_db
def test_unknown_entries_and_sightings_are_404(api: Any, superuser: Any) -> None:
    client = api(superuser)
    assert client.get("/api/catalog/tools/999999/").status_code == 404
    assert client.post("/api/catalog/tools/999999/disable/").status_code == 404
    assert client.post("/api/catalog/sightings/999999/classify/", {"kind": "readonly"}).status_code == 404


@pytest.fixture
def sightings(db: None) -> dict[str, ToolSighting]:
    return {
        "mutating": tool_sighting_record(tool="shell/run_command", agent_name="fixer", argument_names=["host", "cmd"]),
        "readonly": tool_sighting_record(tool="shell/list_files", agent_name="fixer", argument_names=["host"]),
    }


@pytest.mark.django_db
def test_sightings_are_listed_and_filtered(api: Any, viewer: Any, sightings: dict[str, ToolSighting]) -> None:
    client = api(viewer)
    rows = client.get("/api/catalog/sightings/", {"status": "unclassified"}).json()["results"]
    assert {r["tool"] for r in rows} == {"shell/run_command", "shell/list_files"}
    row = next(r for r in rows if r["tool"] == "shell/run_command")
    assert row["count"] == 1
    assert row["agents"] == ["fixer"]
    assert row["argument_names"] == ["cmd", "host"]
    assert client.get("/api/catalog/sightings/", {"status": "added"}).json()["results"] == []
    assert client.get("/api/catalog/sightings/", {"status": "nonsense"}).status_code == 400


@pytest.mark.django_db
def test_classifying_as_mutating_adds_the_tool(api: Any, superuser: Any, sightings: dict[str, ToolSighting]) -> None:
    sighting = sightings["mutating"]
    response = api(superuser).post(
        f"/api/catalog/sightings/{sighting.pk}/classify/", {"kind": "mutating", "vm_arg": "host"}
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["sighting"]["status"] == "added"
    assert body["sighting"]["classified_by"] == "root"
    assert body["entry"]["pattern"] == "shell/run_command"
    assert body["entry"]["vm_arg"] == "host"
    assert MutatingTool.objects.get(pattern="shell/run_command").added_by == "root"
    [event] = _events("catalog.sighting.classified_mutating")
    assert (event.actor_type, event.actor) == ("user", "root")


@pytest.mark.django_db
def test_classifying_as_readonly_ignores_the_tool(api: Any, superuser: Any, sightings: dict[str, ToolSighting]) -> None:
    sighting = sightings["readonly"]
    response = api(superuser).post(f"/api/catalog/sightings/{sighting.pk}/classify/", {"kind": "readonly"})
    assert response.status_code == 200
    assert response.json()["entry"] is None
    assert response.json()["sighting"]["status"] == "ignored"
    assert not MutatingTool.objects.filter(pattern="shell/list_files").exists()
    assert _events("catalog.sighting.classified_readonly")[0].actor == "root"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "fields"),
    [
        ({"kind": "mutating"}, {"vm_arg"}),
        ({"kind": "mutating", "vm_arg": "no spaces"}, {"vm_arg"}),
        ({"kind": "dangerous"}, {"kind"}),
        ({}, {"kind"}),
    ],
)
def test_classifying_rejects_bad_input(
    api: Any, superuser: Any, sightings: dict[str, ToolSighting], body: dict[str, str], fields: set[str]
) -> None:
    sighting = sightings["mutating"]
    response = api(superuser).post(f"/api/catalog/sightings/{sighting.pk}/classify/", body)
    assert response.status_code == 400
    assert set(response.json()) == fields
    sighting.refresh_from_db()
    assert sighting.status == "unclassified"


@pytest.mark.django_db
def test_a_viewer_may_not_classify(api: Any, viewer: Any, sightings: dict[str, ToolSighting]) -> None:
    sighting = sightings["mutating"]
    response = api(viewer).post(f"/api/catalog/sightings/{sighting.pk}/classify/", {"kind": "readonly"})
    assert response.status_code == 403
    sighting.refresh_from_db()
    assert sighting.status == "unclassified"
