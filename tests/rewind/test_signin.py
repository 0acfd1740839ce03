"""The web front: sign-in throttled and locked out (logged, audited), a content security policy on
every page, and approve, deny and end-session acting only on a POST with its CSRF token."""

from __future__ import annotations

import json
import logging
from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from recoveries.models import FlrSession, RecoveryRequest
from rewind.audit import Actor
from rewind.models import AuditEvent
from rewind.sites import site_create
from tests.mcpfixtures import make_agent_token

LOGIN = "/admin/login/"


def _login(client: Client, password: str, username: str = "alice") -> int:
    return client.post(LOGIN, {"username": username, "password": password, "next": "/admin/"}).status_code


@pytest.mark.django_db
def test_a_run_of_failed_logins_locks_the_pair_out_logs_and_audits_it(
    approver: Any, settings: Any, caplog: Any
) -> None:
    client = Client()
    with caplog.at_level(logging.WARNING):
        statuses = [_login(client, f"wrong-{i}") for i in range(settings.AXES_FAILURE_LIMIT)]
    assert statuses[:-1] == [200] * (settings.AXES_FAILURE_LIMIT - 1)  # the form again, saying why
    assert statuses[-1] == 429
    # Locked out: even the right password is refused, and no session is made.
    assert _login(client, "pw-alice") == 429
    assert "_auth_user_id" not in client.session
    event = AuditEvent.objects.get(action="signin.locked_out")
    assert event.data == {"username": "alice", "ip_address": "127.0.0.1"}
    assert "wrong-" not in json.dumps(event.data)
    assert "sign-in locked out: user 'alice' from 127.0.0.1" in caplog.text
    assert "wrong-" not in caplog.text
    # Another person from the same address is not held back.
    assert _login(Client(), "pw-bob", username="bob") in (200, 302)


@pytest.mark.django_db
def test_the_lock_out_ends_after_its_minutes_and_a_success_resets_the_count(approver: Any, settings: Any) -> None:
    client = Client()
    for i in range(settings.AXES_FAILURE_LIMIT):
        _login(client, f"wrong-{i}")
    with time_machine.travel(timezone.now() + settings.AXES_COOLOFF_TIME + timedelta(seconds=1)):
        assert _login(client, "pw-alice") == 302
        client.logout()
        for i in range(settings.AXES_FAILURE_LIMIT - 1):
            assert _login(client, f"again-{i}") == 200
        assert _login(client, "pw-alice") == 302  # a success resets the count
        client.logout()
        assert _login(client, "late-wrong") == 200


@pytest.mark.django_db
def test_every_page_carries_a_policy_that_allows_no_inline_script_or_style(superuser: Any) -> None:
    client = Client()
    client.force_login(superuser)
    for path in ("/admin/", LOGIN, "/admin/recoveries/recoveryrequest/?status__exact=pending", "/api/docs/"):
        policy = client.get(path)["Content-Security-Policy"]
        assert "script-src 'self'" in policy
        assert "style-src 'self'" in policy
        assert "frame-ancestors 'none'" in policy
        assert "unsafe-inline" not in policy
        assert "unsafe-eval" not in policy


@pytest.fixture
def pending(db: None, agent_owner: Any) -> RecoveryRequest:
    agent, _ = make_agent_token("csrf-agent")
    return RecoveryRequest.objects.create(
        agent=agent, agent_name=agent.name, vm_identifier="vm-1", vm_name="web01", path="/etc/hostname",
        normalized_path="/etc/hostname", os="linux", reason="csrf", checkpoint_identifier="cp-1",
        checkpoint_source="tag", expires_at=timezone.now() + timedelta(hours=1),
    )  # fmt: skip


def _status(recovery: RecoveryRequest) -> str:
    recovery.refresh_from_db()
    return recovery.status


@pytest.mark.parametrize("decision", ["approve", "deny"])
def test_approve_and_deny_act_only_on_a_post_with_its_csrf_token(decision: str, pending: Any, approver: Any) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(approver)
    url = reverse("admin:recoveries_recoveryrequest_decide", args=[pending.pk, decision])
    page = client.get(url)
    assert page.status_code == 200  # the confirmation page, nothing done
    assert _status(pending) == RecoveryRequest.Status.PENDING
    assert client.post(url, {"confirm": "yes"}).status_code == 403  # no CSRF token
    assert _status(pending) == RecoveryRequest.Status.PENDING
    api = f"/api/recoveries/{pending.pk}/{decision}/"
    assert client.get(api).status_code == 405
    assert client.post(api, {}, content_type="application/json").status_code == 403  # no X-CSRFToken
    assert _status(pending) == RecoveryRequest.Status.PENDING
    assert (
        not AuditEvent.objects.filter(action__startswith="recoveries.request.")
        .exclude(action="recoveries.request.created")
        .exists()
    )


def test_ending_a_session_acts_only_on_a_post_with_its_csrf_token(db: None, superuser: Any) -> None:
    site = site_create(
        actor=Actor.system("tests"), name="S", base_url="https://zvm.invalid", username="u", password="p"
    )
    client = Client(enforce_csrf_checks=True)
    client.force_login(superuser)
    url = reverse("admin:recoveries_flrsession_end", args=[site.pk, "s-foreign"])
    before = AuditEvent.objects.count()
    assert client.post(url, {"confirm": "yes"}).status_code == 403
    assert AuditEvent.objects.count() == before
    assert not FlrSession.objects.exists()
