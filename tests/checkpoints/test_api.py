"""/api/guards/: read-only list with filters and a detail with one row per VPG."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone

from rewind.models import ChangeGuard, TaggedCheckpoint
from tests.helpers import guard_row


def _vpgs(statuses: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Each VPG's row in ``status``: a listed one with its checkpoint, any other timed out."""

    def row(name: str, status: str) -> dict[str, Any]:
        listed = status == TaggedCheckpoint.Status.LISTED
        return {
            "status": status,
            "recovery_site_name": "Site B",
            "checkpoint_identifier": f"cp-{name}" if listed else "",
            "checkpoint_timestamp": timezone.now() if listed else None,
            "error": "" if listed else "timed out",
        }

    return {name: row(name, status) for name, status in statuses.items()}


@pytest.fixture
def guards(db: None) -> list[ChangeGuard]:
    return [
        guard_row(
            agent="fixer",
            vm="web01",
            change_id="c-1",
            status="ok",
            tool="ssh/exec",
            vpgs=_vpgs({"vpg-web": "listed", "vpg-web-dr": "listed"}),
        ),
        guard_row(
            agent="fixer",
            vm="app01",
            change_id="c-2",
            status="failed",
            tool="ssh/exec",
            vpgs=_vpgs({"vpg-app-1": "listed", "vpg-app-2": "timed_out"}),
        ),
        guard_row(
            agent="other",
            vm="web01",
            change_id="c-3",
            status="running",
            tool="ssh/exec",
            vpgs=_vpgs({"vpg-web": "waiting"}),
        ),
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
        guard_row(
            agent="fixer",
            vm=f"vm{i}",
            change_id=f"more-{i}",
            status="ok",
            tool="ssh/exec",
            vpgs=_vpgs({"vpg-a": "listed", "vpg-b": "listed"}),
        )
    with django_assert_max_num_queries(6):
        assert len(client.get("/api/guards/").json()["results"]) == 13
