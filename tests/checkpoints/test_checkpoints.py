"""Tagged checkpoints against the simulator.

The insert step and the site pollers' rounds run in this process (``inline_tasks``); a worker
killed mid-wait or mid-call needs the real Celery worker.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection

from rewind.checkpoints.services import guard_create, guard_read_and_resume
from rewind.lib.errors import ApplicationError
from rewind.models import AuditEvent, ChangeGuard, SitePoller, TaggedCheckpoint
from tests.fixtures import InlineTasks, wait_until
from tests.helpers import guard_request, tagged_rows, wait_guard_finished


def _wait_rows(guard: ChangeGuard, status: str, timeout: float = 30.0, tasks: InlineTasks | None = None) -> None:
    def reached() -> bool:
        return all(r.status == status for r in guard.vpgs.all())

    if tasks is not None:
        tasks.wait_for(reached, timeout)
    else:
        wait_until(reached, timeout, what=f"every row of guard {guard.pk} {status}")


def _wait_calls(sim: Any, slug: str, key: str, count: int, timeout: float = 30.0) -> None:
    """Until the simulator has seen ``count`` calls of ``key`` (a bound on a hang, not a delay)."""
    wait_until(lambda: sim.calls(slug).get(key, 0) >= count, timeout, what=f"{count} x {key} on {slug}")


def test_it_checkpoints_every_vpg_of_a_vm_and_waits_until_listed(
    sim: Any, sites: Any, agent: Any, inline_tasks: InlineTasks
) -> None:
    guard = wait_guard_finished(guard_request(agent, "app01", action="edit app.conf"), tasks=inline_tasks)
    assert guard.status == ChangeGuard.Status.OK, guard.error
    rows = list(guard.vpgs.all())
    assert sorted(r.vpg_name for r in rows) == ["vpg-app-1", "vpg-app-2", "vpg-app-3"]
    assert all(
        r.status == TaggedCheckpoint.Status.LISTED and r.checkpoint_identifier and r.checkpoint_timestamp for r in rows
    )
    # vpg-app-3 replicates to site-c; the insert still goes through the protected site (site-a).
    assert rows[2].site is not None
    assert rows[2].site.name == "Site A"
    assert len(tagged_rows(sim, "site-a", "vpg-app-3", guard.tag)) == 1
    actions = list(AuditEvent.objects.filter(target_id=str(guard.pk)).values_list("action", flat=True))
    assert actions.count("guard.checkpoint.requested") == 3
    assert actions.count("guard.checkpoint.listed") == 3
    assert "guard.created" in actions
    assert "guard.ok" in actions


def test_it_checkpoints_a_vm_in_one_vpg(sim: Any, sites: Any, agent: Any, inline_tasks: InlineTasks) -> None:
    guard = wait_guard_finished(guard_request(agent, "db01", action="edit config"), tasks=inline_tasks)
    assert guard.status == ChangeGuard.Status.OK
    assert [r.vpg_name for r in guard.vpgs.all()] == ["vpg-db"]
    assert guard.tag.startswith("ai:fixer | edit config | vm=db01 | change=")
    assert guard.tag.endswith("Z")


def test_it_waits_for_a_slow_listing(sim: Any, sites: Any, agent: Any, inline_tasks: InlineTasks) -> None:
    sim.add_fault("checkpoint_listing_delay", seconds=1.5)
    guard = wait_guard_finished(guard_request(agent, "web01"), tasks=inline_tasks)
    assert guard.status == ChangeGuard.Status.OK, guard.error
    assert all(r.waited_ms is not None and r.waited_ms >= 1500 for r in guard.vpgs.all())


def test_it_fails_when_the_checkpoint_is_never_listed(
    sim: Any, sites: Any, agent: Any, inline_tasks: InlineTasks
) -> None:
    sim.add_fault("checkpoint_never_listed", count=1)
    guard = wait_guard_finished(guard_request(agent, "web01", timeout_s=3), tasks=inline_tasks)
    assert guard.status == ChangeGuard.Status.FAILED
    statuses = sorted(r.status for r in guard.vpgs.all())
    assert statuses == [TaggedCheckpoint.Status.LISTED, TaggedCheckpoint.Status.TIMED_OUT]
    assert "not listed within 3 s" in guard.error
    assert AuditEvent.objects.filter(action="guard.checkpoint.failed", target_id=str(guard.pk)).count() == 1
    assert AuditEvent.objects.filter(action="guard.failed", target_id=str(guard.pk)).exists()


def test_it_reports_a_failed_insert_task(sim: Any, sites: Any, agent: Any, inline_tasks: InlineTasks) -> None:
    sim.add_fault("task_fail", message="Journal is full", count=1)
    guard = wait_guard_finished(guard_request(agent, "db01"), tasks=inline_tasks)
    assert guard.status == ChangeGuard.Status.FAILED
    row = guard.vpgs.get()
    assert row.status == TaggedCheckpoint.Status.FAILED
    assert "Journal is full" in row.error


def test_it_survives_token_expiry_during_the_wait(sim: Any, sites: Any, agent: Any, inline_tasks: InlineTasks) -> None:
    sim.add_fault("checkpoint_listing_delay", seconds=2)
    guard = guard_request(agent, "app01")
    _wait_rows(guard, TaggedCheckpoint.Status.WAITING, tasks=inline_tasks)
    sim.add_fault("expire_tokens")
    guard = wait_guard_finished(guard, tasks=inline_tasks)
    assert guard.status == ChangeGuard.Status.OK, guard.error


def test_concurrent_requests_with_one_change_id_insert_once(
    sim: Any, sites: Any, agent: Any, inline_tasks: InlineTasks
) -> None:
    outcomes: list[Any] = []
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def request() -> None:
        try:
            start.wait()
            outcomes.append(guard_create(agent_name=agent.name, vm="web01", action="edit", change_id="CHG-42"))
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=request) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len({o.guard.pk for o in outcomes}) == 1
    assert sum(o.created for o in outcomes) == 1
    guard = wait_guard_finished(outcomes[0].guard, tasks=inline_tasks)
    assert guard.status == ChangeGuard.Status.OK
    for vpg in ("vpg-web", "vpg-web-dr"):
        assert len(tagged_rows(sim, "site-a", vpg, guard.tag)) == 1


def test_the_same_change_id_returns_the_existing_record(
    sim: Any, sites: Any, agent: Any, inline_tasks: InlineTasks
) -> None:
    first = guard_create(agent_name=agent.name, vm="db01", action="edit", change_id="CHG-1")
    assert first.guard is not None
    wait_guard_finished(first.guard, tasks=inline_tasks)
    again = guard_create(agent_name=agent.name, vm="db01", action="something else", change_id="CHG-1")
    assert not again.created
    assert again.guard is not None
    assert again.guard.pk == first.guard.pk
    assert ChangeGuard.objects.count() == 1
    assert len(tagged_rows(sim, "site-a", "vpg-db", first.guard.tag)) == 1


@pytest.mark.parametrize(
    ("vm", "reason"),
    [("cloud01", "AWS"), ("newvm01", "initial sync")],
)
def test_it_refuses_vms_that_cannot_take_a_checkpoint(
    sim: Any, sites: Any, agent: Any, db: None, vm: str, reason: str
) -> None:
    outcome = guard_create(agent_name=agent.name, vm=vm, action="edit")
    assert outcome.guard is None
    assert outcome.refusal
    assert reason in outcome.refusal
    assert outcome.refused
    assert reason in outcome.refused[0].reason
    assert not ChangeGuard.objects.exists()
    event = AuditEvent.objects.get(action="guard.refused")
    assert event.actor == "fixer"
    assert reason in event.data["reason"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"vm": "db01", "action": "  |\x00\n "}, "action"),
        ({"vm": "db01", "action": "x", "change_id": "a|b"}, "change_id"),
        ({"vm": "db01", "action": "x", "timeout_s": 0}, "timeout_s"),
        ({"vm": "nosuchvm", "action": "x"}, "nosuchvm"),
        ({"vm": "dup01", "action": "x"}, "matches 2 VMs"),
    ],
)
def test_it_rejects_bad_input_and_changes_nothing(
    sim: Any, sites: Any, agent: Any, db: None, kwargs: Any, message: str
) -> None:
    with pytest.raises(ApplicationError, match=message):
        guard_create(agent_name=agent.name, **kwargs)
    assert not ChangeGuard.objects.exists()
    assert not AuditEvent.objects.filter(action__startswith="guard.").exists()


def test_a_guard_whose_worker_was_killed_finishes_without_inserting_twice(
    sim: Any, sites: Any, agent: Any, worker: Any
) -> None:
    sim.add_fault("checkpoint_listing_delay", seconds=3)
    guard = guard_request(agent, "web01", timeout_s=120)
    _wait_rows(guard, TaggedCheckpoint.Status.WAITING)
    worker.kill()
    worker.start()
    guard = _wait_via_status(guard.pk, timeout=90)
    assert guard.status == ChangeGuard.Status.OK, guard.error
    # The kill may land in the insert step or in the site poller's wait; either way it finishes,
    # inserting each VPG's checkpoint once, and the wait was the site poller's.
    assert SitePoller.objects.get(site=sites["site-a"]).rounds >= 1
    for vpg in ("vpg-web", "vpg-web-dr"):
        assert len(tagged_rows(sim, "site-a", vpg, guard.tag)) == 1
    assert AuditEvent.objects.filter(action="guard.checkpoint.requested", target_id=str(guard.pk)).count() == 2


def test_an_insert_cut_off_mid_call_is_found_by_its_tag_not_repeated(
    sim: Any, sites: Any, agent: Any, worker: Any
) -> None:
    # The insert call hangs; the worker dies while it is in flight. Whether the ZVM still acts
    # on the cut-off call depends on the web server: either way the next run must end with
    # exactly one checkpoint (found by its tag, its task adopted, or inserted once more).
    sim.add_fault("hang", seconds=2, path_regex="/checkpoints$", method="POST", count=1)
    guard = guard_request(agent, "db01", timeout_s=120)
    _wait_rows(guard, TaggedCheckpoint.Status.INSERTING)
    # In flight: the simulator counted the insert call, whose answer the hang holds for 2 s.
    _wait_calls(sim, "site-a", "POST /v1/vpgs/{vpg_id}/checkpoints", 1)
    worker.kill()
    worker.start()
    guard = _wait_via_status(guard.pk, timeout=90)
    assert guard.status == ChangeGuard.Status.OK, guard.error
    assert guard.vpgs.get().status == TaggedCheckpoint.Status.LISTED
    assert len(tagged_rows(sim, "site-a", "vpg-db", guard.tag)) == 1


def _wait_via_status(guard_id: int, timeout: float) -> ChangeGuard:
    """Poll like an agent does: a status read restarts a dead poller of the guard's sites."""

    def finished() -> ChangeGuard | None:
        guard = guard_read_and_resume(guard_id)
        return guard if guard.status in (ChangeGuard.Status.OK, ChangeGuard.Status.FAILED) else None

    def state() -> str:
        guard = ChangeGuard.objects.get(pk=guard_id)
        rows = [(r.vpg_name, r.status, r.task_id, r.error) for r in guard.vpgs.all()]
        pollers = list(SitePoller.objects.values_list("site_id", "lease_owner", "lease_expires_at"))
        return f"guard {guard_id} finished (now {guard.status}, rows {rows}, pollers {pollers})"

    return wait_until(finished, timeout, what=state, every=0.5)


def test_an_insert_that_never_reached_the_zvm_is_made_once_more(
    sim: Any, sites: Any, agent: Any, inline_tasks: InlineTasks
) -> None:
    # A 502 from a proxy: the ZVM never saw the call. No tag, no insert task → insert again, once.
    sim.add_fault("http_error", site="site-a", status=502, path_regex="/checkpoints$", method="POST", count=1)
    guard = wait_guard_finished(guard_request(agent, "db01", timeout_s=60), tasks=inline_tasks)
    assert guard.status == ChangeGuard.Status.OK, guard.error
    requested = AuditEvent.objects.filter(action="guard.checkpoint.requested", target_id=str(guard.pk))
    assert [e.data["retry"] for e in requested.order_by("seq")] == [False, True]
    assert len(tagged_rows(sim, "site-a", "vpg-db", guard.tag)) == 1
