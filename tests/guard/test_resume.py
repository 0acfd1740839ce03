"""A guard whose wait task died is queued again once its lease runs out; never twice at once."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from rewind.checkpoints.services import guard_create, guard_read_and_resume, guards_resume_stale
from rewind.models import AuditEvent, ChangeGuard


@pytest.fixture
def guard(sim: Any, sites: Any, agent: Any, db: None) -> ChangeGuard:
    outcome = guard_create(agent_name=agent.name, vm="web01", action="edit")
    assert outcome.guard is not None
    return outcome.guard


def _expire(guard: ChangeGuard) -> None:
    ChangeGuard.objects.filter(pk=guard.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))


def test_a_queued_guard_holds_a_lease_until_its_task_starts(guard: ChangeGuard) -> None:
    assert guard.lease_owner.startswith("queued:")
    assert guard.lease_expires_at is not None
    assert guard.lease_expires_at > timezone.now()
    assert guards_resume_stale() == 0


def test_the_sweep_queues_a_stale_guard_once(guard: ChangeGuard, django_capture_on_commit_callbacks: Any) -> None:
    _expire(guard)
    with django_capture_on_commit_callbacks() as queued:
        assert guards_resume_stale() == 1
        assert guards_resume_stale() == 0  # the new lease is live
    assert len(queued) == 1
    guard.refresh_from_db()
    assert guard.lease_owner.startswith("queued:")
    assert guard.lease_expires_at is not None
    assert guard.lease_expires_at > timezone.now()
    assert AuditEvent.objects.filter(action="guard.resumed", target_id=str(guard.pk)).count() == 1


def test_a_status_read_resumes_a_stale_guard(guard: ChangeGuard, django_capture_on_commit_callbacks: Any) -> None:
    _expire(guard)
    with django_capture_on_commit_callbacks() as queued:
        guard_read_and_resume(guard.pk)
    assert len(queued) == 1


def test_a_finished_guard_is_left_alone(guard: ChangeGuard) -> None:
    ChangeGuard.objects.filter(pk=guard.pk).update(status=ChangeGuard.Status.FAILED)
    _expire(guard)
    assert guards_resume_stale() == 0


def test_the_guard_admin_shows_each_vpg_read_only(guard: ChangeGuard) -> None:
    User.objects.create_superuser("alice", password="alice-pw-123")
    client = Client()
    client.login(username="alice", password="alice-pw-123")
    page = client.get(f"/admin/rewind/changeguard/{guard.pk}/change/")
    assert page.status_code == 200
    assert b"vpg-web-dr" in page.content
    assert guard.tag.encode() in page.content
    listing = client.get(f"/admin/rewind/changeguard/?vm_name=web01&agent_name={guard.agent_name}&status=pending")
    assert listing.status_code == 200
    assert b"web01" in listing.content
