from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client

from rewind.audit import Actor, verify_chain
from rewind.lib.errors import ApplicationError
from rewind.models import AuditEvent, Site
from rewind.sites import site_check, site_client, site_create, site_update
from tests.simfixtures import PASSWORD

pytestmark = pytest.mark.django_db

ADMIN = Actor.user("alice")


def _site(sim, slug: str = "site-a", name: str = "Site A", password: str = PASSWORD) -> Site:
    return site_create(actor=ADMIN, name=name, base_url=sim.site_url(slug), username="admin", password=password)


def test_it_stores_the_password_encrypted_and_audits_without_it(sim) -> None:
    site = _site(sim)
    site.refresh_from_db()
    assert PASSWORD not in site.password_encrypted
    assert site_client(site).local_site().name == "Site A"
    event = AuditEvent.objects.get(action="site.created")
    assert "'zerto'" not in str(event.data)
    assert verify_chain()[1] is None


def test_it_learns_identity_from_localsite(sim) -> None:
    site = _site(sim)
    result = site_check(site=site)
    assert result.ok
    assert result.vpg_count
    assert result.vpg_count > 0
    site.refresh_from_db()
    assert site.identifier
    assert site.site_type == "VCenter"
    assert AuditEvent.objects.filter(action="site.identity_learned").count() == 1


def test_it_refuses_two_sites_for_the_same_zvm(sim) -> None:
    first = _site(sim)
    assert site_check(site=first).ok
    second = _site(sim, name="Site A again")
    result = site_check(site=second)
    assert not result.ok
    assert "same ZVM" in result.error


def test_it_rejects_bad_input() -> None:
    with pytest.raises(ApplicationError):
        site_create(actor=ADMIN, name="x", base_url="ftp://zvm")
    with pytest.raises(ApplicationError):
        site_create(actor=ADMIN, name=" ", base_url="https://zvm")
    assert not Site.objects.exists()


def test_zvm_check_prints_each_site(sim, capsys) -> None:
    _site(sim)
    _site(sim, "site-b", "Site B")
    call_command("zvm_check")
    out = capsys.readouterr().out
    assert "Site A: OK" in out
    assert "Site B: OK" in out
    assert "VPGs" in out


def test_zvm_check_names_the_failing_site_without_secrets(sim, capsys) -> None:
    _site(sim)
    _site(sim, "site-b", "Site B", password="wrong-password-123")
    site_create(actor=ADMIN, name="Gone", base_url="https://127.0.0.1:1", username="admin", password="pw-gone-456")
    with pytest.raises(CommandError, match="2 of 3 sites failed"):
        call_command("zvm_check")
    out = capsys.readouterr().out
    assert "Site A: OK" in out
    assert "Site B: FAILED" in out
    assert "Gone: FAILED" in out
    assert "wrong-password-123" not in out
    assert "pw-gone-456" not in out
    assert "Traceback" not in out


def test_admin_test_connection_action(sim) -> None:
    site = _site(sim)
    User.objects.create_superuser("alice", "a@example.com", "pw-alice-1")
    client = Client()
    client.force_login(User.objects.get(username="alice"))
    response = client.post(
        "/admin/rewind/site/", {"action": "test_connection", "_selected_action": [site.pk]}, follow=True
    )
    assert response.status_code == 200
    assert "Site A: OK" in response.content.decode()


def test_admin_edit_keeps_the_password_when_left_empty(sim) -> None:
    site = _site(sim)
    User.objects.create_superuser("alice", "a@example.com", "pw-alice-1")
    client = Client()
    client.force_login(User.objects.get(username="alice"))
    page = client.get(f"/admin/rewind/site/{site.pk}/change/").content.decode()
    assert site.password_encrypted not in page
    assert PASSWORD not in page.split("id_password")[1][:200]
    response = client.post(
        f"/admin/rewind/site/{site.pk}/change/",
        {
            "name": "Site A",
            "base_url": site.base_url,
            "username": "admin",
            "password": "",
            "client_id": "zerto-client",
            "client_secret": "",
            "ca_bundle": "",
            "enabled": "on",
        },
    )
    assert response.status_code == 302
    assert site_check(site=Site.objects.get(pk=site.pk)).ok
    assert AuditEvent.objects.filter(action="site.changed", actor="alice").exists()


def test_site_update_records_before_and_after(sim) -> None:
    site = _site(sim)
    site_update(actor=ADMIN, site=site, enabled=False)
    event = AuditEvent.objects.get(action="site.changed")
    assert event.data["before"]["enabled"] is True
    assert event.data["after"]["enabled"] is False


def test_site_update_says_which_credentials_were_rotated(sim) -> None:
    site = _site(sim)
    site_update(actor=ADMIN, site=site, password=PASSWORD)
    event = AuditEvent.objects.get(action="site.changed")
    assert event.data["rotated"] == ["password"]


def test_a_site_caps_its_zvm_at_the_default_or_its_own_rate(sim, settings) -> None:
    from rewind.sites import site_connection

    settings.ZVM_MAX_REQUESTS_PER_S = 7.0
    site = _site(sim)
    assert site_connection(site).max_requests_per_s == 7.0
    site_update(actor=ADMIN, site=site, max_requests_per_s=2.5)
    assert site_connection(site).max_requests_per_s == 2.5
    event = AuditEvent.objects.get(action="site.changed")
    assert event.data["before"]["max_requests_per_s"] is None
    assert event.data["after"]["max_requests_per_s"] == 2.5
    for bad in (0, -1, 1001):
        with pytest.raises(ApplicationError, match="request cap"):
            site_update(actor=ADMIN, site=site, max_requests_per_s=bad)


def test_the_admin_and_the_api_show_and_check_the_cap(sim) -> None:
    site = _site(sim)
    User.objects.create_superuser("alice", "a@example.com", "pw-alice-1")
    client = Client()
    client.force_login(User.objects.get(username="alice"))
    assert "id_max_requests_per_s" in client.get(f"/admin/rewind/site/{site.pk}/change/").content.decode()
    form = {
        "name": "Site A",
        "base_url": site.base_url,
        "username": "admin",
        "password": "",
        "client_id": "zerto-client",
        "client_secret": "",
        "ca_bundle": "",
        "enabled": "on",
    }
    refused = client.post(f"/admin/rewind/site/{site.pk}/change/", {**form, "max_requests_per_s": "0"})
    assert refused.status_code == 200
    assert "above 0" in refused.content.decode()
    assert client.post(f"/admin/rewind/site/{site.pk}/change/", {**form, "max_requests_per_s": "3"}).status_code == 302
    assert Site.objects.get(pk=site.pk).max_requests_per_s == 3.0
    api = client.get(f"/api/sites/{site.pk}/")
    assert api.status_code == 200
    assert api.json()["max_requests_per_s"] == 3.0
    bad = client.patch(f"/api/sites/{site.pk}/", {"max_requests_per_s": 0}, content_type="application/json")
    assert bad.status_code == 400
    assert "max_requests_per_s" in bad.json()
    ok = client.patch(f"/api/sites/{site.pk}/", {"max_requests_per_s": None}, content_type="application/json")
    assert ok.status_code == 200
    assert ok.json()["max_requests_per_s"] is None


URL_SECRET = "pw-in-url-9d2f"


@pytest.mark.parametrize(
    ("base_url", "said"),
    [
        ("https://zvm.example.com/v1", "without /v1"),
        ("https://zvm.example.com/V1/", "without /v1"),
        (f"https://admin:{URL_SECRET}@zvm.example.com", "without a user name or password"),
        ("https://admin@zvm.example.com", "without a user name or password"),
        (f"https://zvm.example.com/?password={URL_SECRET}", "without a query"),
        ("https://zvm.example.com/#x", "without a query"),
        ("https://zvm.example.com/?", "without a query"),
    ],
)
def test_the_admin_the_api_and_the_services_refuse_a_bad_base_url_and_never_quote_it(base_url: str, said: str) -> None:
    User.objects.create_superuser("alice", "a@example.com", "pw-alice-1")
    client = Client()
    client.force_login(User.objects.get(username="alice"))
    form = {
        "name": "Site V",
        "base_url": base_url,
        "username": "admin",
        "password": "pw-v-1",
        "client_id": "zerto-client",
        "client_secret": "",
        "ca_bundle": "",
        "enabled": "on",
    }
    refused = client.post("/admin/rewind/site/add/", form)
    assert refused.status_code == 200
    assert said in refused.content.decode()
    api = client.post("/api/sites/", {"name": "Site V", "base_url": base_url}, content_type="application/json")
    assert api.status_code == 400
    assert said in api.json()["base_url"][0]
    assert URL_SECRET not in api.content.decode()
    with pytest.raises(ApplicationError, match=said) as raised:
        site_create(actor=ADMIN, name="Site V", base_url=base_url)
    assert URL_SECRET not in str(raised.value)
    assert not Site.objects.exists()
    assert not AuditEvent.objects.exists()
