"""What recoveries tell the notification channels: "awaits approval" (with the approval URL, beside
the approver e-mail), "expires soon", and a mount of ours that could not be unmounted."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.utils import timezone

from recoveries.announce import recovery_requests_warn_expiring
from recoveries.flr_sessions import session_unmount
from recoveries.models import FlrSession, RecoveryRequest
from recoveries.presenters import approval_url
from recoveries.services import recovery_request_approve, recovery_request_create
from rewind.audit import SYSTEM
from rewind.models import AuditEvent, NotificationDelivery
from rewind.notifications.models import NotificationKind
from rewind.notifications.tasks import DELIVER_MAX_RETRIES
from rewind.sites import site_client
from tests.helpers import work_queued
from tests.receiver import PASSWORD, Receiver

Status = NotificationDelivery.Status


def _request(agent: Any, tagged: Any, vm: str = "web01", path: str = "/etc/hostname") -> RecoveryRequest:
    tagged(vm)
    return recovery_request_create(agent=agent, vm=vm, path=path, reason="hostname got lost")


@pytest.mark.django_db
def test_a_webhook_channel_gets_awaits_approval_with_the_approval_url(
    sim: Any,
    sites: Any,
    people: Any,
    agent: Any,
    tagged: Any,
    receiver: Receiver,
    settings: Any,
    eager: None,
    mailoutbox: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    settings.REWIND_NOTIFY_URLS = [receiver.url()]
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        recovery = _request(agent, tagged)
    assert len(work_queued(callbacks)) == 2  # each channel's task, once committed
    assert len(receiver.posts) == 1
    post = receiver.posts[0]
    assert (post.path, post.user, post.password) == ("/hook", "rewind", PASSWORD)
    assert post.payload["title"] == f"[zerto-rewind] Recovery #{recovery.pk} waits for approval: web01 /etc/hostname"
    review = f"{django_settings.REWIND_PUBLIC_URL}/admin/recoveries/recoveryrequest/{recovery.pk}/review/"
    assert review == approval_url(recovery)
    for words in (review, "web01", "/etc/hostname", "fixer", "hostname got lost", recovery.checkpoint_tag):
        assert words in post.payload["message"], words
    # The approver e-mail is one channel among them: one list of deliveries, one per channel.
    assert len(mailoutbox) == 1
    deliveries = NotificationDelivery.objects.filter(dedupe_key=f"recovery:{recovery.pk}:awaits-approval")
    assert sorted((d.channel_label.split(" ")[0], d.status) for d in deliveries) == [
        ("Approver", Status.SENT),
        (f"json://rewind:****@127.0.0.1:{receiver.port}/hook", Status.SENT),
    ]
    assert {d.kind for d in deliveries} == {NotificationKind.RECOVERY_AWAITS_APPROVAL}
    assert AuditEvent.objects.filter(action="recoveries.request.notified", target_id=str(recovery.pk)).exists()
    assert AuditEvent.objects.filter(action="notification.sent").count() == 1


@pytest.mark.django_db
def test_a_failing_channel_leaves_the_recovery_request_unaffected(
    sim: Any,
    sites: Any,
    people: Any,
    agent: Any,
    tagged: Any,
    receiver: Receiver,
    settings: Any,
    eager: None,
    mailoutbox: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    receiver.status = 500
    settings.REWIND_NOTIFY_URLS = [receiver.url()]
    with django_capture_on_commit_callbacks(execute=True):
        recovery = _request(agent, tagged)
    assert len(receiver.posts) == DELIVER_MAX_RETRIES + 1
    failed = NotificationDelivery.objects.get(channel__startswith="apprise:")
    assert (failed.status, failed.attempts) == (Status.FAILED, DELIVER_MAX_RETRIES + 1)
    assert "500" in failed.last_error
    recovery.refresh_from_db()
    assert recovery.status == RecoveryRequest.Status.PENDING
    assert len(mailoutbox) == 1  # the other channel is not held up by the broken one
    assert recovery_request_approve(recovery_id=recovery.pk, user=people.approver).status == "approved"


@pytest.mark.django_db
def test_a_pending_request_is_announced_once_more_shortly_before_it_expires(
    sim: Any, sites: Any, people: Any, agent: Any, tagged: Any, receiver: Receiver, settings: Any
) -> None:
    settings.REWIND_NOTIFY_URLS = [receiver.url()]
    settings.REWIND_NOTIFY_EXPIRY_WARN_MIN = 10
    soon = _request(agent, tagged)
    later = recovery_request_create(agent=agent, vm="web01", path="/etc/hosts", reason="also")
    decided = recovery_request_create(agent=agent, vm="web01", path="/etc/motd", reason="and this")
    now = timezone.now()
    RecoveryRequest.objects.filter(pk__in=[soon.pk, decided.pk]).update(expires_at=now + timedelta(minutes=5))
    recovery_request_approve(recovery_id=decided.pk, user=people.approver)

    assert recovery_requests_warn_expiring(now=now) == 1
    assert recovery_requests_warn_expiring(now=now + timedelta(minutes=1)) == 0  # a later sweep: nothing new

    (warning,) = NotificationDelivery.objects.filter(kind=NotificationKind.RECOVERY_EXPIRES_SOON)
    assert warning.dedupe_key == f"recovery:{soon.pk}:expires-soon"
    assert warning.title.startswith(f"[zerto-rewind] Recovery #{soon.pk} expires in 5 min")
    assert approval_url(soon) in warning.body
    assert later.pk != soon.pk
    settings.REWIND_NOTIFY_EXPIRY_WARN_MIN = 0
    RecoveryRequest.objects.filter(pk=later.pk).update(expires_at=now + timedelta(minutes=1))
    assert recovery_requests_warn_expiring(now=now) == 0


@pytest.mark.django_db
def test_a_mount_that_could_not_be_unmounted_is_announced_once_to_its_sites_channels(
    sim: Any, sites: Any, receiver: Receiver, settings: Any
) -> None:
    settings.REWIND_NOTIFY_SITE_URLS = {sites["site-b"].name: [receiver.url("/site-b")]}
    info = sim.vm("db01")
    vpg = info["vpgs"][0]
    client = site_client(sites["site-b"])
    checkpoint = client.list_checkpoints(vpg["identifier"])[-1].identifier
    assert checkpoint is not None
    sid = client.flr_mount(vpg_id=vpg["identifier"], vm_id=info["identifier"], checkpoint_id=checkpoint)
    row = FlrSession.objects.create(
        site=sites["site-b"],
        session_id=sid,
        vm_identifier=info["identifier"],
        vpg_identifier=vpg["identifier"],
        checkpoint_identifier=checkpoint,
        status=FlrSession.Status.MOUNTED,
    )
    sim.add_fault("unmount_fail", site="site-b", count=2)
    for _ in range(2):  # the runner's try, then the reaper's
        report = session_unmount(client=client, row=row, actor=SYSTEM, reason="reaped")
        assert report is not None
        assert not report.ok
    (delivery,) = NotificationDelivery.objects.filter(kind=NotificationKind.UNMOUNT_FAILED)
    assert delivery.dedupe_key == f"flr-session:{row.pk}:unmount-failed"
    assert delivery.channel_label.endswith("/site-b")
    assert sid in delivery.body
    assert "/admin/recoveries/flrsession/live/" in delivery.body
