"""Who may read and write: anonymous, a signed-in outsider, staff without and with view permissions, a superuser."""

from __future__ import annotations

from typing import Any

import pytest

READS = [
    "/api/audit/",
    "/api/audit/verify/",
    "/api/sites/",
    "/api/guards/",
    "/api/agents/",
    "/api/catalog/tools/",
    "/api/catalog/sightings/",
]
WRITES = [
    ("/api/sites/", {"name": "X", "base_url": "https://zvm.example.com"}),
    ("/api/agents/", {"name": "bot"}),
    ("/api/catalog/tools/", {"pattern": "ssh/run", "vm_arg": "host", "description": "runs things"}),
]


@pytest.mark.django_db
@pytest.mark.parametrize("path", READS)
def test_it_refuses_reads_without_the_view_permission(api: Any, outsider: Any, staff_no_perms: Any, path: str) -> None:
    assert api(None).get(path).status_code == 403  # as /api/recoveries/: session auth answers 403
    assert api(outsider).get(path).status_code == 403
    assert api(staff_no_perms).get(path).status_code == 403


@pytest.mark.django_db
@pytest.mark.parametrize("path", READS)
def test_it_serves_reads_to_a_viewer_and_a_superuser(api: Any, viewer: Any, superuser: Any, path: str) -> None:
    assert api(viewer).get(path).status_code == 200
    assert api(superuser).get(path).status_code == 200


@pytest.mark.django_db
@pytest.mark.parametrize(("path", "body"), WRITES)
def test_it_refuses_writes_to_a_viewer_and_changes_nothing(
    api: Any, viewer: Any, path: str, body: dict[str, Any]
) -> None:
    from rewind.models import AuditEvent

    before = AuditEvent.objects.count()
    response = api(viewer).post(path, body)
    assert response.status_code == 403
    assert "permission" in response.json()["detail"]
    assert AuditEvent.objects.count() == before


@pytest.mark.django_db
@pytest.mark.parametrize(("path", "body"), WRITES)
def test_a_superuser_may_write(api: Any, superuser: Any, path: str, body: dict[str, Any]) -> None:
    assert api(superuser).post(path, body).status_code == 201


@pytest.mark.django_db
def test_it_needs_the_csrf_token_for_a_signed_in_write(api: Any, superuser: Any) -> None:
    from rewind.models import Agent

    response = api(superuser).post("/api/agents/", {"name": "bot"}, csrf=False)
    assert response.status_code == 403
    assert "CSRF" in response.json()["detail"]
    assert not Agent.objects.exists()


@pytest.mark.django_db
def test_it_refuses_a_user_holding_the_permissions_who_is_not_staff(api: Any, viewer: Any) -> None:
    viewer.is_staff = False
    viewer.save()
    assert api(viewer).get("/api/audit/").status_code == 403


@pytest.mark.django_db
def test_methods_an_endpoint_lacks_answer_405(api: Any, superuser: Any) -> None:
    client = api(superuser)
    assert client.post("/api/audit/", {}).status_code == 405
    assert client.post("/api/guards/", {}).status_code == 405
    assert client.post("/api/catalog/sightings/", {}).status_code == 405


@pytest.mark.django_db
def test_an_agent_bearer_token_opens_nothing(superuser: Any) -> None:
    from django.test import Client

    from rewind.agents import agent_create, agent_token_issue
    from rewind.audit import Actor

    agent = agent_create(actor=Actor.system("tests"), name="bot", owner=superuser)
    token = agent_token_issue(actor=Actor.system("tests"), agent=agent).token
    client = Client(headers={"Authorization": f"Bearer {token}"})
    for path in READS:
        assert client.get(path).status_code == 403
    response = client.post(f"/api/agents/{agent.pk}/tokens/", {}, content_type="application/json")
    assert response.status_code == 403
    response = client.post(
        "/api/catalog/tools/", {"pattern": "x/y", "vm_arg": "host", "description": "d"}, content_type="application/json"
    )
    assert response.status_code == 403
