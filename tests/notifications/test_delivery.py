"""Deliveries through Apprise: once per channel, retried a bounded number of times, recorded,
audited, listed in the admin, and never showing a channel's credentials."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.urls import reverse
from django.utils import timezone

from rewind.models import AuditEvent, NotificationDelivery
from rewind.notifications import services
from rewind.notifications.channels import channels_configured
from rewind.notifications.models import NotificationKind
from rewind.notifications.services import notification_send, notifications_settle
from rewind.notifications.tasks import DELIVER_MAX_RETRIES, notifications_deliver
from tests.helpers import closed_port, work_queued
from tests.receiver import PASSWORD, Receiver

Status = NotificationDelivery.Status


def _send(key: str = "guard:1:failed", kind: str = NotificationKind.GUARD_FAILED, **kw: Any) -> list[Any]:
    return notification_send(kind=kind, dedupe_key=key, title="Something happened", body="Details\nhere", **kw)


@pytest.mark.django_db
def test_an_event_reaches_a_webhook_once_recorded_and_audited(
    receiver: Receiver, settings: Any, eager: None, django_capture_on_commit_callbacks: Any
) -> None:
    settings.REWIND_NOTIFY_URLS = [receiver.url()]
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        (delivery,) = _send()
    assert len(work_queued(callbacks)) == 1  # one channel: its task, queued once committed
    assert [(p.path, p.user, p.password) for p in receiver.posts] == [("/hook", "rewind", PASSWORD)]
    payload = receiver.posts[0].payload
    assert (payload["title"], payload["message"], payload["type"]) == ("Something happened", "Details\nhere", "failure")
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts, delivery.last_error) == (Status.SENT, 1, "")
    assert delivery.channel_label == f"json://rewind:****@127.0.0.1:{receiver.port}/hook"
    assert delivery.finished_at is not None
    event = AuditEvent.objects.get(action="notification.sent")
    assert event.target_id == str(delivery.pk)
    assert event.data["channel"] == delivery.channel_label


@pytest.mark.django_db
def test_the_same_event_twice_is_one_delivery_and_a_redelivered_task_sends_nothing(
    receiver: Receiver, settings: Any, eager: None, django_capture_on_commit_callbacks: Any
) -> None:
    settings.REWIND_NOTIFY_URLS = [receiver.url(), receiver.url()]  # the same URL twice is one channel
    with django_capture_on_commit_callbacks(execute=True):
        (delivery,) = _send()
        assert _send() == []
    assert NotificationDelivery.objects.count() == 1
    assert notifications_deliver.apply(args=[delivery.pk, None]).get() == "already sent"
    assert len(receiver.posts) == 1


@pytest.mark.django_db
def test_the_unique_key_decides_when_another_process_records_the_event_first(
    receiver: Receiver, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.REWIND_NOTIFY_URLS = [receiver.url()]
    (first,) = _send()
    # The other process's row came in after our look for recorded channels.
    monkeypatch.setattr(services, "_taken", lambda dedupe_key, channels: set())
    assert _send() == []
    assert list(NotificationDelivery.objects.values_list("pk", flat=True)) == [first.pk]


def test_concurrent_sweeps_record_and_send_an_event_once(
    transactional_db: None, receiver: Receiver, settings: Any, eager: None
) -> None:
    settings.REWIND_NOTIFY_URLS = [receiver.url()]
    start = threading.Barrier(6)

    def sweep() -> None:
        try:
            start.wait()
            _send(key="site:1:down:1700000000", kind=NotificationKind.SITE_DOWN)
        finally:
            connection.close()

    threads = [threading.Thread(target=sweep) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert NotificationDelivery.objects.filter(dedupe_key="site:1:down:1700000000").count() == 1
    assert len(receiver.posts) == 1


@pytest.mark.django_db
@pytest.mark.parametrize("failure", ["answers 500", "nobody listens"])
def test_a_failing_channel_is_retried_a_bounded_number_of_times_then_recorded_failed(
    failure: str, receiver: Receiver, settings: Any, eager: None, django_capture_on_commit_callbacks: Any
) -> None:
    if failure == "answers 500":
        receiver.status = 500
        url = receiver.url()
    else:
        url = f"json://rewind:{PASSWORD}@127.0.0.1:{closed_port()}/hook"
    settings.REWIND_NOTIFY_URLS = [url]
    with django_capture_on_commit_callbacks(execute=True):
        (delivery,) = _send()  # the failure is not the caller's: nothing raises here
    delivery.refresh_from_db()
    assert delivery.status == Status.FAILED
    assert delivery.attempts == DELIVER_MAX_RETRIES + 1
    assert len(receiver.posts) == (DELIVER_MAX_RETRIES + 1 if failure == "answers 500" else 0)
    assert ("500" if failure == "answers 500" else "Connection") in delivery.last_error
    failed = AuditEvent.objects.get(action="notification.failed")
    assert failed.data["attempts"] == DELIVER_MAX_RETRIES + 1
    assert not AuditEvent.objects.filter(action="notification.sent").exists()


@pytest.mark.django_db
def test_a_channel_gone_from_the_settings_fails_its_delivery_without_sending(receiver: Receiver, settings: Any) -> None:
    settings.REWIND_NOTIFY_URLS = [receiver.url()]
    (delivery,) = _send()
    settings.REWIND_NOTIFY_URLS = []
    assert notifications_deliver.apply(args=[delivery.pk, None]).get() == "failed"
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts, delivery.last_error) == (
        Status.FAILED,
        0,
        "the channel is no longer configured",
    )
    assert receiver.posts == []


@pytest.mark.django_db
def test_site_channels_hear_only_their_sites_events(receiver: Receiver, settings: Any) -> None:
    settings.REWIND_NOTIFY_URLS = [receiver.url("/all")]
    settings.REWIND_NOTIFY_SITE_URLS = {"Site A": [receiver.url("/a")], "Site B": [receiver.url("/b")]}
    labels = {d.channel_label.rsplit("/", 1)[-1] for d in _send(key="e1", sites=["Site B"])}
    assert labels == {"all", "b"}
    assert {d.channel_label.rsplit("/", 1)[-1] for d in _send(key="e2")} == {"all"}


@pytest.mark.django_db
def test_the_settle_sweep_closes_lost_sends_and_queues_lost_tasks_again(
    receiver: Receiver, settings: Any, eager: None, django_capture_on_commit_callbacks: Any
) -> None:
    settings.REWIND_NOTIFY_URLS = [receiver.url()]
    old = timezone.now() - timedelta(hours=1)
    (waiting,) = _send(key="e1")  # recorded, its task lost (the test transaction never commits)
    (stuck,) = _send(key="e2")
    NotificationDelivery.objects.filter(pk=waiting.pk).update(queued_at=old)
    NotificationDelivery.objects.filter(pk=stuck.pk).update(status=Status.SENDING, attempts=1, last_attempt_at=old)

    with django_capture_on_commit_callbacks(execute=True):  # the sweep's tasks go once it commits
        assert notifications_settle() == {"lost": 1, "requeued": 1}
        assert notifications_settle() == {"lost": 0, "requeued": 0}

    waiting.refresh_from_db()
    stuck.refresh_from_db()
    assert waiting.status == Status.SENT
    assert len(receiver.posts) == 1  # the lost send is not sent again: it may have gone out
    assert stuck.status == Status.FAILED
    assert "may have gone out" in stuck.last_error


@pytest.mark.django_db
def test_the_admin_lists_the_channels_masked_and_sends_a_test_through_the_task(
    admin_client: Any, receiver: Receiver, settings: Any, eager: None, django_capture_on_commit_callbacks: Any
) -> None:
    settings.REWIND_NOTIFY_URLS = [receiver.url()]
    settings.REWIND_NOTIFY_SITE_URLS = {"Site B": [receiver.url("/site-b")]}
    changelist = reverse("admin:rewind_notificationdelivery_changelist")
    page = admin_client.get(changelist).content.decode()
    assert f"json://rewind:****@127.0.0.1:{receiver.port}/hook" in page
    assert "events of site Site B" in page
    assert "Approver e-mail" in page
    assert PASSWORD not in page

    site_b = next(c for c in channels_configured() if c.sites == frozenset({"Site B"}))
    with django_capture_on_commit_callbacks(execute=True):
        answer = admin_client.post(reverse("admin:rewind_notificationdelivery_test"), {"channel": site_b.key})
    assert answer.status_code == 302
    assert [p.path for p in receiver.posts] == ["/site-b"]
    assert receiver.posts[0].payload["title"] == "zerto-rewind: test notification"
    test = NotificationDelivery.objects.get(kind=NotificationKind.TEST)
    assert test.status == Status.SENT
    requested = AuditEvent.objects.get(action="notification.test_requested")
    assert (requested.actor_type, requested.actor) == ("user", "admin")

    with django_capture_on_commit_callbacks(execute=True):
        admin_client.post(reverse("admin:rewind_notificationdelivery_test"))  # every Apprise channel
    assert sorted(p.path for p in receiver.posts) == ["/hook", "/site-b", "/site-b"]
    page = admin_client.get(changelist).content.decode()
    assert "zerto-rewind: test notification" in page
    assert PASSWORD not in page


@pytest.mark.django_db
def test_only_people_allowed_to_may_send_a_test(client: Any, receiver: Receiver, settings: Any) -> None:
    settings.REWIND_NOTIFY_URLS = [receiver.url()]
    viewer = User.objects.create_user("viewer", "viewer@example.com", "pw", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_notificationdelivery"))
    client.force_login(viewer)
    page = client.get(reverse("admin:rewind_notificationdelivery_changelist"))
    assert page.status_code == 200
    assert "Send a test notification" not in page.content.decode()
    assert client.post(reverse("admin:rewind_notificationdelivery_test")).status_code == 403
    assert not NotificationDelivery.objects.exists()


@pytest.mark.django_db
def test_a_database_error_while_recording_leaves_the_callers_transaction_usable(
    receiver: Receiver, settings: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from django.db import OperationalError, transaction

    settings.REWIND_NOTIFY_URLS = [receiver.url()]

    def refuse(*args: Any) -> None:
        NotificationDelivery.objects.create(kind="test", dedupe_key="half", channel="x", title="t", body="b")
        raise OperationalError("the database refused the row")

    monkeypatch.setattr(services, "_create", refuse)
    with transaction.atomic():
        assert _send() == []
        # The caller's own work goes on in the same transaction; the half-made row is gone.
        assert NotificationDelivery.objects.count() == 0
        User.objects.create_user("after", "after@example.com", "pw")
    assert User.objects.filter(username="after").exists()
    assert "could not be recorded (OperationalError" in caplog.text
