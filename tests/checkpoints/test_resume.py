"""A guard holds no lease: its sites' pollers do. A poller whose chain died is restarted by the
beat's sweep or by a read of one of its guards, once; rows whose site was removed are ended."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from rewind.checkpoints.poller import POLL_TASK, pollers_restart_stale
from rewind.checkpoints.selectors import guard_progress
from rewind.checkpoints.services import guard_create, guard_read_and_resume, guards_orphaned_finish
from rewind.checkpoints.tasks import LEGACY_WAIT_TASK, checkpoint_wait
from rewind.models import AuditEvent, ChangeGuard, SitePoller, TaggedCheckpoint
from rewind.workers.services import broker_outage_noticed, broker_reconnected
from tests.fixtures import InlineTasks


@pytest.fixture
def guard(sim: Any, sites: Any, agent: Any, inline_tasks: InlineTasks) -> ChangeGuard:
    outcome = guard_create(agent_name=agent.name, vm="web01", action="edit")
    assert outcome.guard is not None
    assert inline_tasks.pending() == [POLL_TASK], "creating a guard kicks its site's poller, nothing else"
    return outcome.guard


def _kill_chain() -> None:
    # The queued round's message is lost: its token no longer matches, and its lease ran out.
    SitePoller.objects.update(lease_owner="queued:lost", lease_expires_at=timezone.now() - timedelta(seconds=1))


def test_the_sweep_restarts_a_dead_poller_of_a_waiting_guard_once(
    guard: ChangeGuard, inline_tasks: InlineTasks
) -> None:
    assert pollers_restart_stale() == 0, "the queued round's lease is live"
    _kill_chain()
    assert pollers_restart_stale() == 1
    assert pollers_restart_stale() == 0
    assert inline_tasks.pending() == [POLL_TASK, POLL_TASK]
    assert SitePoller.objects.get().lease.token, "a queued round holds the site"


def test_a_status_read_restarts_a_dead_poller_and_audits_it(guard: ChangeGuard, inline_tasks: InlineTasks) -> None:
    guard_read_and_resume(guard.pk)
    assert AuditEvent.objects.filter(action="guard.resumed").count() == 0, "its poller is alive"
    _kill_chain()
    guard_read_and_resume(guard.pk)
    guard_read_and_resume(guard.pk)  # the new chain is alive: nothing more
    assert inline_tasks.pending() == [POLL_TASK, POLL_TASK]
    assert AuditEvent.objects.filter(action="guard.resumed", target_id=str(guard.pk)).count() == 1


def test_a_restarted_chain_inserts_each_checkpoint_once(guard: ChangeGuard, inline_tasks: InlineTasks) -> None:
    _kill_chain()
    assert pollers_restart_stale() == 1
    done = inline_tasks.wait_for(
        lambda: ChangeGuard.objects.filter(pk=guard.pk, status__in=ChangeGuard.FINISHED).first()
    )
    assert done.status == ChangeGuard.Status.OK, done.error
    requested = AuditEvent.objects.filter(action="guard.checkpoint.requested", target_id=str(guard.pk))
    assert requested.count() == guard.vpgs.count(), "the lost round's message found its token gone and did nothing"


def test_a_finished_guard_is_left_alone(guard: ChangeGuard, inline_tasks: InlineTasks) -> None:
    ChangeGuard.objects.filter(pk=guard.pk).update(status=ChangeGuard.Status.FAILED)
    TaggedCheckpoint.objects.filter(guard=guard).update(status=TaggedCheckpoint.Status.FAILED)
    _kill_chain()
    guard_read_and_resume(guard.pk)
    assert pollers_restart_stale() == 0
    assert inline_tasks.pending() == [POLL_TASK]


def test_rows_whose_site_was_removed_end_and_fail_their_guard(guard: ChangeGuard, sites: Any) -> None:
    sites["site-a"].delete()
    assert guards_orphaned_finish() == guard.vpgs.count()
    guard.refresh_from_db()
    assert guard.status == ChangeGuard.Status.FAILED
    assert "removed from this service" in guard.error
    assert guards_orphaned_finish() == 0


def test_a_wait_message_queued_by_an_earlier_version_hands_the_guard_to_the_pollers(
    guard: ChangeGuard, inline_tasks: InlineTasks
) -> None:
    assert checkpoint_wait.name == LEGACY_WAIT_TASK
    _kill_chain()
    assert "handed to the poller of 1 site" in checkpoint_wait(guard.pk, guard.request_id, lease_token="old")
    assert inline_tasks.pending() == [POLL_TASK, POLL_TASK]
    done = inline_tasks.wait_for(
        lambda: ChangeGuard.objects.filter(pk=guard.pk, status__in=ChangeGuard.FINISHED).first()
    )
    assert done.status == ChangeGuard.Status.OK, done.error


def test_the_guard_admin_shows_each_vpg_read_only(guard: ChangeGuard) -> None:
    User.objects.create_superuser("ada", password="ada-pw-123")
    client = Client()
    client.login(username="ada", password="ada-pw-123")
    page = client.get(f"/admin/rewind/changeguard/{guard.pk}/change/")
    assert page.status_code == 200
    assert b"vpg-web-dr" in page.content
    assert guard.tag.encode() in page.content
    listing = client.get(f"/admin/rewind/changeguard/?vm_name=web01&agent_name={guard.agent_name}&status=pending")
    assert listing.status_code == 200
    assert b"web01" in listing.content


def test_a_round_queued_before_the_task_queue_came_back_is_queued_anew_at_once(
    guard: ChangeGuard, inline_tasks: InlineTasks
) -> None:
    # The queued round's lease is live, but the queue was down when (or after) it was sent:
    # its message may be lost, so a read queues it anew instead of waiting for the lease to end.
    before = SitePoller.objects.get()
    assert before.lease.alive(timezone.now())
    assert pollers_restart_stale() == 0
    broker_reconnected(broker="Redis at test", lost_at=timezone.now() - timedelta(seconds=3), noticed_by="w1")
    guard_read_and_resume(guard.pk)
    after = SitePoller.objects.get()
    assert after.lease.token
    assert after.lease_owner != before.lease_owner, "a new token: the old message does nothing"
    assert inline_tasks.pending() == [POLL_TASK, POLL_TASK]
    assert pollers_restart_stale() == 0, "queued after the outage ended: alive"
    done = inline_tasks.wait_for(
        lambda: ChangeGuard.objects.filter(pk=guard.pk, status__in=ChangeGuard.FINISHED).first()
    )
    assert done.status == ChangeGuard.Status.OK, done.error


def test_a_waiting_guard_is_told_first_that_the_task_queue_does_not_answer(guard: ChangeGuard) -> None:
    broker_outage_noticed(broker="Redis at 127.0.0.1:6399/0", error="refused", noticed_by="worker1")
    waiting = guard_progress(guard.pk).waiting_for
    assert waiting is not None
    assert waiting.startswith("the task queue (Redis at 127.0.0.1:6399/0) has not answered since ")
    assert "no poll round can be queued until it answers" in waiting


def test_a_kick_reads_the_poller_row_as_the_orm_does(guard: ChangeGuard) -> None:
    from rewind.checkpoints.poller import _poller_read

    stored = SitePoller.objects.get()
    SitePoller.objects.filter(pk=stored.pk).update(wanted_at=stored.next_round_at)
    stored.refresh_from_db()
    read = _poller_read(stored.pk)
    assert read is not None
    assert stored.lease.alive(timezone.now())
    assert (read.lease, read.next_round_at, read.wanted_at) == (stored.lease, stored.next_round_at, stored.wanted_at)
    assert read.lease.expires_at is not None
    assert read.lease.expires_at.utcoffset() == timedelta(0)
    assert _poller_read(stored.pk + 1000) is None


def test_a_guard_asked_for_again_is_found_by_its_vm_and_change_id(guard: ChangeGuard, agent: Any) -> None:
    again = guard_create(agent_name=agent.name, vm="web01", action="edit", change_id=guard.change_id)
    assert (again.created, again.guard) == (False, guard)
    other = guard_create(agent_name=agent.name, vm="web01", action="edit", change_id=guard.change_id + "-2")
    assert other.created
    assert other.guard != guard
