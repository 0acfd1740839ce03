"""/api/audit/: filters, newest first, cursor pages, detail, and the chain check."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from rewind.audit import Actor, audit_record
from rewind.models import AuditEvent
from tests.audit.support import raw_update


def _seed() -> list[AuditEvent]:
    with_rid = [
        audit_record(
            actor=Actor.user("alice"),
            action="site.created",
            target=("rewind.site", "1"),
            data={"n": 1},
            request_id="req-aaaa-1111",
        )
    ]
    return [
        *with_rid,
        audit_record(
            actor=Actor.agent("fixer"),
            action="catalog.tool.added",
            target=("catalog.mutatingtool", "7"),
            data={"n": 2},
            request_id="req-bbbb-2222",
        ),
        audit_record(
            actor=Actor.user("bob"),
            action="site.changed",
            target=("rewind.site", "1"),
            data={"n": 3},
            request_id="req-bbbb-2222",
        ),
        audit_record(actor=Actor.system(), action="site.identity_learned", target=("rewind.site", "2"), data={"n": 4}),
    ]


def _seqs(response: Any) -> list[int]:
    assert response.status_code == 200, response.content
    return [row["seq"] for row in response.json()["results"]]


@pytest.mark.django_db
def test_it_lists_newest_first_with_every_field(api: Any, viewer: Any) -> None:
    events = _seed()
    body = api(viewer).get("/api/audit/").json()
    assert [r["seq"] for r in body["results"]] == [e.seq for e in reversed(events)]
    first = body["results"][-1]
    assert first["actor"] == "alice"
    assert first["actor_type"] == "user"
    assert first["data"] == {"n": 1}
    assert first["hash"] == events[0].hash
    assert first["prev_hash"] == "0" * 64
    assert first["target_type"] == "rewind.site"
    assert first["target_id"] == "1"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"request_id": "req-bbbb-2222"}, [3, 2]),
        ({"action": "site.changed"}, [3]),
        ({"actor": "alice"}, [1]),
        ({"actor_type": "system"}, [4]),
        ({"target_type": "rewind.site", "target_id": "1"}, [3, 1]),
        ({"target_type": "rewind.site"}, [4, 3, 1]),
        ({"action": "site.changed", "actor": "alice"}, []),
    ],
)
def test_it_filters(api: Any, viewer: Any, params: dict[str, str], expected: list[int]) -> None:
    _seed()
    assert _seqs(api(viewer).get("/api/audit/", params)) == expected


@pytest.mark.django_db
def test_it_filters_by_time(api: Any, viewer: Any) -> None:
    _seed()
    now = timezone.now()
    client = api(viewer)
    assert _seqs(client.get("/api/audit/", {"since": (now - timedelta(minutes=5)).isoformat()})) == [4, 3, 2, 1]
    assert _seqs(client.get("/api/audit/", {"since": (now + timedelta(minutes=5)).isoformat()})) == []
    assert _seqs(client.get("/api/audit/", {"until": (now - timedelta(minutes=5)).isoformat()})) == []
    assert _seqs(client.get("/api/audit/", {"until": (now + timedelta(minutes=5)).isoformat()})) == [4, 3, 2, 1]


@pytest.mark.django_db
def test_it_rejects_bad_filters_with_field_errors(api: Any, viewer: Any) -> None:
    response = api(viewer).get("/api/audit/", {"since": "yesterday", "actor_type": "robot"})
    assert response.status_code == 400
    assert set(response.json()) == {"since", "actor_type"}


@pytest.mark.django_db
def test_it_pages_with_a_cursor(api: Any, viewer: Any) -> None:
    _seed()
    client = api(viewer)
    first = client.get("/api/audit/", {"limit": 3}).json()
    assert [r["seq"] for r in first["results"]] == [4, 3, 2]
    audit_record(actor=Actor.system(), action="later.event")  # appends do not shift the next page
    second = client.get(first["next"]).json()
    assert [r["seq"] for r in second["results"]] == [1]
    assert second["next"] is None


@pytest.mark.django_db
def test_it_shows_one_event_by_its_seq(api: Any, viewer: Any) -> None:
    events = _seed()
    client = api(viewer)
    body = client.get(f"/api/audit/{events[1].seq}/").json()
    assert body["action"] == "catalog.tool.added"
    assert body["actor"] == "fixer"
    missing = client.get("/api/audit/999/")
    assert missing.status_code == 404
    assert "999" in missing.json()["detail"]


@pytest.mark.django_db
def test_it_has_no_write_endpoints(api: Any, superuser: Any) -> None:
    event = _seed()[0]
    client = api(superuser)
    assert client.post("/api/audit/", {"action": "forged"}).status_code == 405
    assert client.patch(f"/api/audit/{event.seq}/", {"actor": "mallory"}).status_code == 405
    assert client.client.delete(f"/api/audit/{event.seq}/", headers={"X-CSRFToken": client.csrf}).status_code == 405
    assert AuditEvent.objects.get(seq=event.seq).actor == "alice"


@pytest.mark.django_db
def test_verify_reports_an_intact_chain(api: Any, viewer: Any) -> None:
    _seed()
    assert api(viewer).get("/api/audit/verify/").json() == {"ok": True, "events": 4, "anchors": 0}


@pytest.mark.django_db(transaction=True)
def test_verify_names_the_tampered_event(api: Any, viewer: Any) -> None:
    events = _seed()
    raw_update(events[2], "actor", "'mallory'")
    body = api(viewer).get("/api/audit/verify/").json()
    assert body == {
        "ok": False,
        "events": 2,
        "anchors": 0,
        "broken_at": 3,
        "reason": "its content does not match its hash",
    }


@pytest.mark.django_db
def test_verify_needs_the_view_permission(api: Any, staff_no_perms: Any) -> None:
    assert api(staff_no_perms).get("/api/audit/verify/").status_code == 403


@pytest.mark.django_db
def test_the_list_takes_a_fixed_number_of_queries(api: Any, viewer: Any, django_assert_max_num_queries: Any) -> None:
    for _ in range(30):
        _seed()
    client = api(viewer)
    with django_assert_max_num_queries(6):
        assert len(client.get("/api/audit/").json()["results"]) == 100
