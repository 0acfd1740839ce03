"""/api/guards/: read-only list with filters and a detail with one row per VPG."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone

from rewind.models import ChangeGuard, TaggedCheckpoint


def _guard(agent: str, vm: str, change_id: str, status: str, vpgs: dict[str, str]) -> ChangeGuard:
    guard = ChangeGuard.objects.create(
        agent_name=agent,
        tool="ssh/exec",
        action="edit",
        vm_identifier=f"srv.{vm}-id",
        vm_name=vm,
        change_id=change_id,
        tag=f"ai:{agent} | edit | vm={vm} | change={change_id}",
        status=status,
        timeout_s=60,
    )
    for name, row_status in vpgs.items():
        listed = row_status == TaggedCheckpoint.Status.LISTED
        TaggedCheckpoint.objects.create(
            guard=guard,
            vpg_name=name,
            vpg_identifier=f"{name}-guid",
            status=row_status,
            recovery_site_name="Site B",
            checkpoint_identifier=f"cp-{name}" if listed else "",
            checkpoint_timestamp=timezone.now() if listed else None,
            error="" if listed else "timed out",
        )
    return guard


@pytest.fixture
def guards(db: None) -> list[ChangeGuard]:
    return [
        _guard("fixer", "web01", "c-1", "ok", {"vpg-web": "listed", "vpg-web-dr": "listed"}),
        _guard("fixer", "app01", "c-2", "failed", {"vpg-app-1": "listed", "vpg-app-2": "timed_out"}),
        _guard("other", "web01", "c-3", "running", {"vpg-web": "waiting"}),
    ]


def _ids(response: Any) -> list[int]:
    assert response.status_code == 200, response.content
    return [g["id"] for g in response.json()["results"]]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({}, [2, 1, 0]),
        ({"agent": "fixer"}, [1, 0]),
        ({"vm": "web01"}, [2, 0]),
        ({"vm": "srv.app01-id"}, [1]),
        ({"status": "failed"}, [1]),
        ({"change_id": "c-3"}, [2]),
        ({"agent": "other", "status": "ok"}, []),
    ],
)
def test_it_filters(
    api: Any, viewer: Any, guards: list[ChangeGuard], params: dict[str, str], expected: list[int]
) -> None:
    assert _ids(api(viewer).get("/api/guards/", params)) == [guards[i].pk for i in expected]


@pytest.mark.django_db
def test_the_list_counts_listed_vpgs(api: Any, viewer: Any, guards: list[ChangeGuard]) -> None:
    rows = {g["change_id"]: g for g in api(viewer).get("/api/guards/").json()["results"]}
    assert (rows["c-1"]["vpgs_listed"], rows["c-1"]["vpgs_total"]) == (2, 2)
    assert (rows["c-2"]["vpgs_listed"], rows["c-2"]["vpgs_total"]) == (1, 2)
    assert rows["c-2"]["status"] == "failed"
    assert rows["c-2"]["agent_name"] == "fixer"


@pytest.mark.django_db
def test_the_detail_has_one_row_per_vpg(api: Any, viewer: Any, guards: list[ChangeGuard]) -> None:
    body = api(viewer).get(f"/api/guards/{guards[1].pk}/").json()
    assert body["tag"] == guards[1].tag
    assert body["vm_name"] == "app01"
    rows = {v["vpg_name"]: v for v in body["vpgs"]}
    assert rows["vpg-app-1"]["status"] == "listed"
    assert rows["vpg-app-1"]["checkpoint_identifier"] == "cp-vpg-app-1"
    assert rows["vpg-app-1"]["checkpoint_timestamp"] is not None
    assert rows["vpg-app-2"]["status"] == "timed_out"
    assert rows["vpg-app-2"]["error"] == "timed out"


@pytest.mark.django_db
def test_bad_filters_and_unknown_ids(api: Any, viewer: Any, guards: list[ChangeGuard]) -> None:
    client = api(viewer)
    response = client.get("/api/guards/", {"status": "exploded"})
    assert response.status_code == 400
    assert set(response.json()) == {"status"}
    assert client.get("/api/guards/999999/").status_code == 404


@pytest.mark.django_db
def test_it_is_read_only(api: Any, superuser: Any, guards: list[ChangeGuard]) -> None:
    client = api(superuser)
    assert client.post("/api/guards/", {"vm_name": "x"}).status_code == 405
    assert client.patch(f"/api/guards/{guards[0].pk}/", {"status": "failed"}).status_code == 405
    guards[0].refresh_from_db()
    assert guards[0].status == "ok"


@pytest.mark.django_db
def test_the_list_takes_a_fixed_number_of_queries(
    api: Any, viewer: Any, guards: list[ChangeGuard], django_assert_max_num_queries: Any
) -> None:
    client = api(viewer)
    for i in range(10):
        _guard("fixer", f"vm{i}", f"more-{i}", "ok", {"vpg-a": "listed", "vpg-b": "listed"})
    with django_assert_max_num_queries(6):
        assert len(client.get("/api/guards/").json()["results"]) == 13
