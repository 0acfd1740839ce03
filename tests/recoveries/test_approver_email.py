"""Approvers are mailed when a request is made: who, what the mail says, outages, no mail at all."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.contrib.auth.models import Group, Permission, User
from django_celery_results.models import TaskResult

from recoveries.approver_email import approver_addresses
from recoveries.models import RecoveryRequest
from recoveries.services import recovery_request_approve, recovery_request_create
from recoveries.tasks import NOTIFY_MAX_RETRIES, recoveries_notify_approvers
from rewind.agents import agent_token_issue
from rewind.audit import Actor
from rewind.celery import app
from rewind.models import AuditEvent
from tests.fixtures import wait_until
from tests.helpers import work_queued

NOTIFIED = "recoveries.request.notified"
FAILED = "recoveries.request.notify_failed"


@pytest.fixture
def eager() -> Iterator[None]:
    """Tasks queued on commit run right here (the queue itself is tested with the real worker below)."""
    before = app.conf.task_always_eager
    app.conf.task_always_eager = True
    try:
        yield
    finally:
        app.conf.task_always_eager = before


@pytest.fixture
def more_people(people: Any) -> dict[str, User]:
    """Approvers by every route, and people who must not get the mail."""
    perm = Permission.objects.get(codename="approve_recovery")
    group = Group.objects.create(name="approvers")
    group.permissions.add(perm)

    def make(name: str, **kw: Any) -> User:
        return User.objects.create_user(name, kw.pop("email", f"{name}@example.com"), "pw", **kw)

    carol = make("carol", is_staff=True)
    carol.groups.add(group)
    out = {
        "carol": carol,
        "root": make("root", is_staff=True, is_superuser=True),
        "gone": make("gone", is_staff=True, is_active=False),
        "nomail": make("nomail", is_staff=True, email=""),
        "outside": make("outside"),  # holds the permission but cannot open the admin
    }
    for name in ("gone", "nomail", "outside"):
        out[name].user_permissions.add(perm)
    return out


def _request(agent: Any, tagged: Any) -> RecoveryRequest:
    tagged("web01")
    return recovery_request_create(
        agent=agent, vm="web01", path="/etc/hostname", reason="hostname got lost\nafter edit"
    )


@pytest.mark.django_db
def test_a_new_request_mails_every_approver_but_the_agents_owner(
    sim,
    sites,
    people,
    more_people,
    agent,
    tagged,
    eager,
    mailoutbox,
    settings,
    django_capture_on_commit_callbacks,
) -> None:
    settings.REWIND_APPROVER_EMAILS = ["oncall@example.com", "ALICE@example.com", "olivia@example.com"]
    settings.EMAIL_HOST_PASSWORD = "smtp-secret-42"
    token = agent_token_issue(actor=Actor.system("tests"), agent=agent).token
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        recovery = _request(agent, tagged)
    assert len(work_queued(callbacks)) == 1
    assert len(mailoutbox) == 1
    mail = mailoutbox[0]
    # alice, bob: direct permission; carol: group; root: superuser; oncall: the extra list.
    # Not olivia (owns the agent, even though the extra list names her), mallory (no
    # permission), gone (inactive), nomail (no address), outside (not staff).
    assert sorted(a.casefold() for a in mail.to) == [
        "alice@example.com",
        "bob@example.com",
        "carol@example.com",
        "oncall@example.com",
        "root@example.com",
    ]
    review = f"{django_settings.REWIND_PUBLIC_URL}/admin/recoveries/recoveryrequest/{recovery.pk}/review/"
    for words in (
        "web01",
        recovery.vm_identifier,
        "/etc/hostname",
        "fixer",
        "hostname got lost",
        "after edit",
        recovery.checkpoint_tag,
        recovery.checkpoint_identifier,
        "vpg-web",
        "Site B",
        f"{recovery.expires_at:%Y-%m-%d %H:%M:%S} UTC",
        review,
    ):
        assert words in mail.body, words
    assert "web01" in mail.subject
    assert "/etc/hostname" in mail.subject
    assert "\n" not in mail.subject
    assert mail.from_email == django_settings.REWIND_MAIL_FROM
    assert token not in mail.body
    assert "smtp-secret-42" not in mail.body
    event = AuditEvent.objects.get(action=NOTIFIED)
    assert event.target_id == str(recovery.pk)
    assert event.data["count"] == 5
    assert "smtp-secret-42" not in str(event.data)


@pytest.mark.django_db
def test_a_mail_outage_is_retried_a_bounded_number_of_times_then_audited(
    sim,
    sites,
    people,
    agent,
    tagged,
    eager,
    settings,
    django_capture_on_commit_callbacks,
) -> None:
    with socket.socket() as s:  # a port nobody listens on: every connection is refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_USE_TLS = "127.0.0.1", port, False
    settings.EMAIL_HOST_USER, settings.EMAIL_HOST_PASSWORD = "mailer", "smtp-secret-42"
    with django_capture_on_commit_callbacks(execute=True):
        recovery = _request(agent, tagged)  # the outage does not fail the request
    recovery.refresh_from_db()
    assert recovery.status == RecoveryRequest.Status.PENDING
    assert not AuditEvent.objects.filter(action=NOTIFIED).exists()
    failed = AuditEvent.objects.get(action=FAILED)
    assert failed.data["attempts"] == NOTIFY_MAX_RETRIES + 1
    assert "Connection" in failed.data["error"]
    assert "smtp-secret-42" not in str(failed.data)
    # The request is still approvable: the mail is only a cue.
    assert recovery_request_approve(recovery_id=recovery.pk, user=people.approver).status == "approved"


@pytest.mark.django_db
def test_nothing_is_mailed_for_a_decided_request_or_without_recipients(
    sim,
    sites,
    people,
    agent,
    tagged,
    mailoutbox,
    settings,
    caplog,
) -> None:
    recovery = _request(agent, tagged)
    User.objects.exclude(pk=people.owner.pk).update(email="")
    assert approver_addresses(recovery) == []
    with caplog.at_level("WARNING", logger="recoveries"):
        assert recoveries_notify_approvers.apply(args=[recovery.pk, None]).get() == "no recipients"
    assert "no approver has an email address" in caplog.text
    settings.REWIND_APPROVER_EMAILS = ["oncall@example.com"]
    assert approver_addresses(recovery) == ["oncall@example.com"]
    recovery_request_approve(recovery_id=recovery.pk, user=people.approver)
    assert recoveries_notify_approvers.apply(args=[recovery.pk, None]).get() == "not pending"
    assert recoveries_notify_approvers.apply(args=[recovery.pk + 1000, None]).get() == "gone"
    assert mailoutbox == []
    assert not AuditEvent.objects.filter(action__in=[NOTIFIED, FAILED]).exists()


@pytest.mark.django_db
def test_without_a_mail_server_nothing_is_sent_and_the_log_says_so(
    sim,
    sites,
    people,
    agent,
    tagged,
    settings,
    caplog,
) -> None:
    settings.EMAIL_BACKEND = "recoveries.mailbackend.NoMailBackend"
    recovery = _request(agent, tagged)
    with caplog.at_level("INFO", logger="recoveries"):
        assert recoveries_notify_approvers.apply(args=[recovery.pk, None]).get() == "not sent"
    assert "no mail configured" in caplog.text
    assert not AuditEvent.objects.filter(action__in=[NOTIFIED, FAILED]).exists()


def test_the_real_worker_runs_the_mail_task_queued_when_the_request_commits(
    worker, sim, sites, people, agent, tagged
) -> None:
    recovery = _request(agent, tagged)
    # The worker runs with the deployment's mail settings: no EMAIL_HOST, no DEBUG → no mail.
    args = re.compile(rf"^\"?[\[(]\s*{recovery.pk}\s*,")  # the repr of the arguments, stored as JSON

    def notified() -> TaskResult | None:
        rows = TaskResult.objects.filter(task_name="recoveries.notify_approvers", status="SUCCESS")
        return next((r for r in rows if args.match(r.task_args or "")), None)

    done = wait_until(notified, 60, what="the notification task", every=0.2)  # a bound on a hang
    assert "not sent" in done.result


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, "recoveries.mailbackend.NoMailBackend"),
        ({"DJANGO_DEBUG": "true"}, "django.core.mail.backends.console.EmailBackend"),
        ({"EMAIL_HOST": "smtp.example.com"}, "django.core.mail.backends.smtp.EmailBackend"),
        ({"REWIND_APPROVER_EMAILS": "ok@example.com, not an address"}, "REWIND_APPROVER_EMAILS"),
        ({"EMAIL_PORT": "smtp"}, "EMAIL_PORT must be an integer"),
    ],
)
@pytest.mark.process
def test_mail_settings_are_read_strictly(tmp_path: Any, env: dict[str, str], expected: str) -> None:
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("EMAIL_", "REWIND_", "DJANGO_"))}
    code = "import django; django.setup(); from django.conf import settings; print(settings.EMAIL_BACKEND)"
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=django_settings.BASE_DIR,
        env={**keep, "DJANGO_SETTINGS_MODULE": "rewind.settings", "REWIND_VAR_DIR": str(tmp_path), **env},
    )
    assert expected in proc.stdout + proc.stderr
