"""Guards and sites tell the channels: a guard failed or timed out, a site unreachable for too long."""

from __future__ import annotations

import time
from typing import Any

import pytest

from rewind.audit import Actor
from rewind.checkpoints.rows import guards_finish
from rewind.models import ChangeGuard, NotificationDelivery, TaggedCheckpoint
from rewind.notifications.models import NotificationKind
from rewind.sites import site_create
from rewind.sites.announce import sites_announce_down
from rewind.sites.zvm_shared import shared_breaker
from tests.helpers import guard_row
from tests.receiver import Receiver

SETUP = Actor.system("tests")
pytestmark = pytest.mark.django_db


@pytest.fixture
def guard() -> ChangeGuard:
    """A running guard on web01 of Site A: one VPG's checkpoint listed, the other's timed out."""
    site = site_create(actor=SETUP, name="Site A", base_url="https://zvm-a.example.com")
    return guard_row(
        action="edit nginx.conf",
        tool="ssh/exec",
        vm_identifier="vm-1",
        tag="ai:fixer | edit nginx.conf | vm=web01 | change=chg-1 | 2026-01-01T00:00:00Z",
        vpgs={
            "vpg-web": {"vpg_identifier": "vpg-web", "site": site, "status": TaggedCheckpoint.Status.LISTED},
            "vpg-web-dr": {
                "vpg_identifier": "vpg-web-dr",
                "site": site,
                "status": TaggedCheckpoint.Status.TIMED_OUT,
                "error": "not listed within 60 s",
            },
        },
    )


def test_a_failed_guard_is_announced_once_to_every_channel_and_its_sites(
    receiver: Receiver, settings: Any, guard: ChangeGuard
) -> None:
    settings.REWIND_NOTIFY_URLS = [receiver.url("/all")]
    settings.REWIND_NOTIFY_SITE_URLS = {"Site A": [receiver.url("/a")], "Site B": [receiver.url("/b")]}

    guards_finish([guard])
    guards_finish([ChangeGuard.objects.get(pk=guard.pk)])  # a second finisher changes nothing
    guard.refresh_from_db()
    assert guard.status == ChangeGuard.Status.FAILED

    deliveries = NotificationDelivery.objects.filter(kind=NotificationKind.GUARD_FAILED)
    assert sorted(d.channel_label.rsplit("/", 1)[-1] for d in deliveries) == ["a", "all"]
    delivery = deliveries[0]
    assert delivery.dedupe_key == f"guard:{guard.pk}:failed"
    assert delivery.title == "[zerto-rewind] Guard timed out: web01 (agent fixer)"
    for words in ("vpg-web-dr: timed_out (not listed within 60 s)", "vpg-web: listed", "ssh/exec", guard.tag):
        assert words in delivery.body, words
    assert f"/admin/rewind/changeguard/{guard.pk}/change/" in delivery.body


def test_an_ok_guard_tells_nobody(receiver: Receiver, settings: Any, guard: ChangeGuard) -> None:
    settings.REWIND_NOTIFY_URLS = [receiver.url()]
    TaggedCheckpoint.objects.filter(guard=guard).update(status=TaggedCheckpoint.Status.LISTED, error="")
    guards_finish([guard])
    guard.refresh_from_db()
    assert guard.status == ChangeGuard.Status.OK
    assert not NotificationDelivery.objects.exists()


def test_a_site_unreachable_past_the_threshold_is_announced_once_per_outage(receiver: Receiver, settings: Any) -> None:
    site = site_create(actor=SETUP, name="Site A", base_url="https://zvm-a.example.com")
    site_create(actor=SETUP, name="Site B", base_url="https://zvm-b.example.com")
    settings.REWIND_NOTIFY_URLS = [receiver.url()]
    settings.REWIND_NOTIFY_SITE_DOWN_MIN = 10
    breaker, key = shared_breaker(), str(site.pk)
    try:
        breaker.failed(key, site.name, "connection refused", at_once=True)
        assert sites_announce_down() == []  # down for seconds: not yet
        later = time.time() + 11 * 60
        assert sites_announce_down(now=later) == ["Site A"]
        assert sites_announce_down(now=later + 60) == ["Site A"]  # still down, already told
    finally:
        breaker.forget(key)  # Redis keeps circuits beyond the test's database
    (delivery,) = NotificationDelivery.objects.filter(kind=NotificationKind.SITE_DOWN)
    assert delivery.dedupe_key.startswith(f"site:{site.pk}:down:")
    assert delivery.title == "[zerto-rewind] Site Site A unreachable for 11 min"
    assert "connection refused" in delivery.body
    assert f"/admin/rewind/site/{site.pk}/change/" in delivery.body


def test_a_notification_that_cannot_be_recorded_never_fails_the_guard(
    receiver: Receiver,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    guard: ChangeGuard,
) -> None:
    settings.REWIND_NOTIFY_URLS = [receiver.url()]

    def broken(**kwargs: Any) -> None:
        raise RuntimeError("the notifications part is broken")

    monkeypatch.setattr("rewind.checkpoints.announce.notification_send", broken)
    guards_finish([guard])
    guard.refresh_from_db()
    assert guard.status == ChangeGuard.Status.FAILED
    assert "could not record the notification that guard" in caplog.text


def test_a_checkpoint_about_to_leave_the_journal_is_announced_once(
    receiver: Receiver, settings: Any, guard: ChangeGuard
) -> None:
    from datetime import timedelta

    from django.utils import timezone

    from rewind.checkpoints.retention import retention_warning_record

    settings.REWIND_NOTIFY_URLS = [receiver.url("/all")]
    row = guard.vpgs.get(vpg_name="vpg-web")
    row.leaves_journal_at = timezone.now() + timedelta(hours=3)
    row.save(update_fields=["leaves_journal_at"])

    assert retention_warning_record(row=row) is True
    assert retention_warning_record(row=row) is False  # warned once: nothing more is sent

    (delivery,) = NotificationDelivery.objects.filter(kind=NotificationKind.CHECKPOINT_LEAVING_JOURNAL)
    assert delivery.dedupe_key == f"guard:{row.guard_id}:vpg:{row.pk}:leaves-journal"
    assert "web01" in delivery.title
    assert "vpg-web" in delivery.body
    assert "no file can be recovered from it" in delivery.body
