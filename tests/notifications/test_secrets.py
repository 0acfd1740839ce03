"""A channel's credentials reach the service it belongs to and nothing else: not the log (at any
level, Apprise's trace included), not the audit log, not a delivery row, not the admin."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from django.forms.models import model_to_dict
from django.urls import reverse

from rewind.models import AuditEvent, NotificationDelivery
from rewind.notifications.models import NotificationKind
from rewind.notifications.services import notification_send
from tests.helpers import closed_port
from tests.receiver import PASSWORD, Receiver


@pytest.mark.django_db
def test_no_channel_credential_appears_in_logs_audit_rows_deliveries_or_the_admin(
    receiver: Receiver,
    settings: Any,
    eager: None,
    caplog: pytest.LogCaptureFixture,
    admin_client: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    slack_token = "Zq8VwXy2Ab3Cd4Ef5Gh6Ij7K"
    settings.REWIND_NOTIFY_URLS = [
        receiver.url(),  # works
        f"json://rewind:{PASSWORD}@127.0.0.1:{closed_port()}/down",  # fails, retried, recorded failed
    ]
    settings.REWIND_NOTIFY_SITE_URLS = {"Site A": [f"slack://T1234ABCD/B5678EFGH/{slack_token}"]}
    caplog.set_level(1)  # everything, Apprise's trace level (below DEBUG) included
    for name in ("apprise", "urllib3", "urllib3.connectionpool", "celery", "rewind", "recoveries"):
        caplog.set_level(1, logger=name)
    # The Slack host is not reachable from here: its failure is one more text that could carry the token.
    with django_capture_on_commit_callbacks(execute=True):
        notification_send(
            kind=NotificationKind.GUARD_FAILED, dedupe_key="guard:7:failed", title="t", body="b", sites=["Site A"]
        )
        admin_client.post(reverse("admin:rewind_notificationdelivery_test"))
    assert receiver.posts[0].password == PASSWORD  # it was used where it belongs
    statuses = sorted(NotificationDelivery.objects.values_list("status", flat=True))
    assert statuses.count("sent") == 2
    assert "failed" in statuses
    assert any(r.levelno < logging.DEBUG for r in caplog.records)  # the trace was on
    secrets = (PASSWORD, slack_token)

    def clean(text: str) -> bool:
        return not any(s in text for s in secrets)

    assert clean(caplog.text)
    assert all(clean(str(model_to_dict(e))) for e in AuditEvent.objects.all())
    assert all(clean(str(model_to_dict(d))) for d in NotificationDelivery.objects.all())
    pages = [reverse("admin:rewind_notificationdelivery_changelist")] + [
        reverse("admin:rewind_notificationdelivery_change", args=[pk])
        for pk in NotificationDelivery.objects.values_list("pk", flat=True)
    ]
    for page in pages:
        answer = admin_client.get(page)
        assert answer.status_code == 200
        assert clean(answer.content.decode()), page
