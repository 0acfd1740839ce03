"""/api/sites/: secrets never leave, writes are audited as the person, the check runs against the simulator."""

from __future__ import annotations

from typing import Any

import pytest

from rewind.audit import Actor
from rewind.lib.crypto import decrypt
from rewind.models import AuditEvent, Site
from rewind.sites import site_create
from tests.simfixtures import PASSWORD as SIM_PASSWORD

PASSWORD = "Pw-Very-Secret-81"
CLIENT_SECRET = "Cs-Very-Secret-92"
PEM = "-----BEGIN CERTIFICATE-----\nMIIBxyz\n-----END CERTIFICATE-----"


def _assert_no_secrets(response: Any, site: Site) -> None:
    text = response.content.decode()
    for secret in (PASSWORD, CLIENT_SECRET, "BEGIN CERTIFICATE"):
        assert secret not in text
    for stored in (site.password_encrypted, site.client_secret_encrypted):
        assert not stored or stored not in text
    for key in ("password", "client_secret", "password_encrypted", "client_secret_encrypted", "ca_bundle"):
        assert f'"{key}"' not in text


@pytest.fixture
def created(api: Any, superuser: Any) -> tuple[Any, Any, Site]:
    client = api(superuser)
    response = client.post(
        "/api/sites/",
        {
            "name": "Site Z",
            "base_url": "https://zvm.example.com/",
            "username": "admin",
            "password": PASSWORD,
            "client_secret": CLIENT_SECRET,
            "ca_bundle": PEM,
            "verify_tls": True,
        },
    )
    assert response.status_code == 201, response.content
    return client, response, Site.objects.get(name="Site Z")


@pytest.mark.django_db
def test_it_creates_a_site_without_echoing_a_secret(created: tuple[Any, Any, Site], viewer: Any, api: Any) -> None:
    client, response, site = created
    body = response.json()
    assert body["base_url"] == "https://zvm.example.com"
    assert body["ca_bundle_pinned"] is True
    assert decrypt(site.password_encrypted) == PASSWORD
    assert decrypt(site.client_secret_encrypted) == CLIENT_SECRET
    _assert_no_secrets(response, site)
    _assert_no_secrets(client.get("/api/sites/"), site)
    _assert_no_secrets(api(viewer).get(f"/api/sites/{site.pk}/"), site)


@pytest.mark.django_db
def test_it_audits_the_creation_as_the_person(created: tuple[Any, Any, Site]) -> None:
    _, response, site = created
    event = AuditEvent.objects.get(action="site.created", target_id=str(site.pk))
    assert (event.actor_type, event.actor) == ("user", "root")
    assert event.request_id == response["X-Request-ID"]
    assert PASSWORD not in str(event.data)
    assert CLIENT_SECRET not in str(event.data)


@pytest.mark.django_db
def test_an_empty_password_keeps_the_stored_one(created: tuple[Any, Any, Site]) -> None:
    client, _, site = created
    response = client.patch(f"/api/sites/{site.pk}/", {"password": "", "username": "ops"})
    assert response.status_code == 200, response.content
    site.refresh_from_db()
    assert site.username == "ops"
    assert decrypt(site.password_encrypted) == PASSWORD
    assert site.ca_bundle == PEM  # omitted: still pinned
    event = AuditEvent.objects.filter(action="site.changed").get()
    assert event.actor == "root"
    assert event.data["before"]["username"] == "admin"
    assert event.data["after"]["username"] == "ops"


@pytest.mark.django_db
def test_a_new_password_replaces_the_old_and_is_not_echoed(created: tuple[Any, Any, Site]) -> None:
    client, _, site = created
    response = client.put(
        f"/api/sites/{site.pk}/",
        {"name": "Site Z", "base_url": "https://zvm2.example.com", "password": "Another-Pw-77", "ca_bundle": ""},
    )
    assert response.status_code == 200, response.content
    assert "Another-Pw-77" not in response.content.decode()
    site.refresh_from_db()
    assert decrypt(site.password_encrypted) == "Another-Pw-77"
    assert decrypt(site.client_secret_encrypted) == CLIENT_SECRET
    assert site.ca_bundle == ""
    assert response.json()["ca_bundle_pinned"] is False
    assert AuditEvent.objects.get(action="site.changed").actor == "root"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "fields"),
    [
        ({"name": "", "base_url": "https://zvm.example.com"}, {"name"}),
        ({"name": "S", "base_url": "zvm.example.com"}, {"base_url"}),
        ({"name": "S", "base_url": "https://zvm.example.com/v1"}, {"base_url"}),
        ({"name": "S", "base_url": "https://zvm.example.com", "ca_bundle": "not a pem"}, {"ca_bundle"}),
        ({"name": "S", "base_url": "https://zvm.example.com", "verify_tls": "perhaps"}, {"verify_tls"}),
        ({"base_url": "https://zvm.example.com"}, {"name"}),
    ],
)
def test_it_rejects_bad_input_with_field_errors(
    api: Any, superuser: Any, body: dict[str, Any], fields: set[str]
) -> None:
    response = api(superuser).post("/api/sites/", body)
    assert response.status_code == 400
    assert set(response.json()) == fields
    assert not Site.objects.exists()
    assert not AuditEvent.objects.exists()


@pytest.mark.django_db
def test_it_refuses_a_taken_name(created: tuple[Any, Any, Site]) -> None:
    client, _, site = created
    other = site_create(actor=Actor.system("tests"), name="Site Y", base_url="https://y.example.com")
    assert client.post("/api/sites/", {"name": "Site Z", "base_url": "https://a.example.com"}).status_code == 400
    response = client.patch(f"/api/sites/{other.pk}/", {"name": "Site Z"})
    assert response.status_code == 400
    assert "name" in response.json()
    assert client.patch(f"/api/sites/{site.pk}/", {"name": "Site Z"}).status_code == 200  # its own name


@pytest.mark.django_db
def test_unknown_sites_are_404(api: Any, superuser: Any) -> None:
    client = api(superuser)
    assert client.get("/api/sites/999/").status_code == 404
    assert client.patch("/api/sites/999/", {"username": "x"}).status_code == 404
    assert client.post("/api/sites/999/check/").status_code == 404


@pytest.mark.django_db
def test_a_viewer_may_not_change_or_check_a_site(created: tuple[Any, Any, Site], api: Any, viewer: Any) -> None:
    _, _, site = created
    client = api(viewer)
    assert client.patch(f"/api/sites/{site.pk}/", {"username": "x"}).status_code == 403
    assert client.post(f"/api/sites/{site.pk}/check/").status_code == 403


@pytest.mark.django_db
def test_the_check_learns_the_identity_and_counts_vpgs(api: Any, superuser: Any, sim: Any) -> None:
    client = api(superuser)
    created = client.post(
        "/api/sites/",
        {"name": "A", "base_url": sim.site_url("site-a"), "username": "admin", "password": SIM_PASSWORD},
    ).json()
    response = client.post(f"/api/sites/{created['id']}/check/")
    assert response.status_code == 200
    body = response.json()
    state = {s["slug"]: s for s in sim.control("GET", "/_sim/state")["sites"]}
    assert body["ok"] is True
    assert body["error"] is None
    assert body["identity"]["identifier"] == state["site-a"]["identifier"]
    assert body["identity"]["name"] == "Site A"
    assert body["vpg_count"] > 0
    assert body["site"]["identifier"] == state["site-a"]["identifier"]
    assert body["site"]["last_error"] == ""
    assert SIM_PASSWORD not in response.content.decode()
    event = AuditEvent.objects.get(action="site.identity_learned")
    assert (event.actor_type, event.actor) == ("user", "root")


@pytest.mark.django_db
def test_the_check_reports_a_refused_login(api: Any, superuser: Any, sim: Any) -> None:
    client = api(superuser)
    created = client.post(
        "/api/sites/", {"name": "A", "base_url": sim.site_url("site-a"), "username": "admin", "password": "wrong-pw-1"}
    ).json()
    body = client.post(f"/api/sites/{created['id']}/check/").json()
    assert body["ok"] is False
    assert body["identity"] is None
    assert body["vpg_count"] is None
    assert body["error"]
    assert "wrong-pw-1" not in body["error"]
    assert body["site"]["last_error"] == body["error"]
