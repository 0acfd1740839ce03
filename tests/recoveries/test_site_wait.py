"""A recovery whose recovery site is down waits for it: no worker hangs, it runs when the site answers, until it expires.

The runner's task run in this process (``inline_tasks``), the simulator over HTTPS. Site B (the
recovery site of db01's VPG) hangs on every path and is marked unavailable by one timed-out call
of the test; the run is refused by its circuit at once, so it never waits for the hung ZVM. Behaviour only (statuses, audit, the requests the simulator saw), never timings.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from django.conf import settings
from django.test import Client
from django.utils import timezone

from recoveries.models import RecoveryRequest
from recoveries.presenters import recovery_agent_out, recovery_dict
from recoveries.runner import recovery_run
from recoveries.services import recovery_request_approve, recovery_request_create
from recoveries.site_wait import recoveries_resume_waiting
from rewind.audit.actions import RecoveryAction
from rewind.models import AuditEvent, Site, SiteCircuit
from rewind.sites import site_circuit, site_client, sites_probe
from rewind.sites.circuit import CIRCUIT_PREFIX
from rewind.zvm import ZvmTransientError
from tests.fixtures import InlineTasks
from tests.helpers import wait_recovery_finished

pytestmark = pytest.mark.timeout(300)
PATH = "/etc/my.cnf"


@pytest.fixture
def site_b_down(sim: Any, sites: dict[str, Site], settings: Any) -> int:
    """Site B hangs and is marked unavailable; the requests it saw until then."""
    settings.ZVM_CONNECT_TIMEOUT_S = settings.ZVM_READ_TIMEOUT_S = 0.5  # this process's one timed-out call
    settings.ZVM_CIRCUIT_PROBE_S = 600  # no trial falls due by itself: the test brings it forward
    settings.ZVM_CIRCUIT_PROBE_MAX_S = 1200
    sim.add_fault("hang", site="site-b", seconds=3600, path_regex=".*")
    with pytest.raises(ZvmTransientError, match="did not answer"):
        site_client(sites["site-b"]).local_site()
    assert site_circuit(sites["site-b"]).is_open
    return sim.requests_seen("site-b")


def _trial_due_now(site: Site) -> None:
    """Bring the open circuit's next trial forward to now, in whichever store keeps it (instead of sleeping)."""
    if settings.ZVM_SHARED_REDIS_URL:
        with redis.Redis.from_url(settings.ZVM_SHARED_REDIS_URL) as client:
            client.hset(CIRCUIT_PREFIX + str(site.pk), "next_trial_at", 0)
    else:
        SiteCircuit.objects.filter(site=site).update(next_trial_at=0.0)


def _approved_request(agent: Any, people: Any, tagged: Any) -> RecoveryRequest:
    tagged("db01", "chg-db")
    return recovery_request_create(agent=agent, vm="db01", path=PATH, reason="config broke", change_id="chg-db")


def _wait_waiting(tasks: InlineTasks, recovery: RecoveryRequest, timeout: float = 180.0) -> RecoveryRequest:
    """Until the run parked (a bound on a hang, not a speed check)."""

    def parked() -> bool:
        recovery.refresh_from_db()
        return recovery.status not in (RecoveryRequest.Status.APPROVED, RecoveryRequest.Status.RUNNING)

    tasks.wait_for(parked, timeout)
    return recovery


def _actions(recovery: RecoveryRequest) -> list[str]:
    return list(AuditEvent.objects.filter(target_id=str(recovery.pk)).order_by("seq").values_list("action", flat=True))


def test_a_run_whose_site_is_down_waits_naming_it_and_recovers_the_file_when_it_answers(
    inline_tasks: InlineTasks, sim: Any, sites: dict[str, Site], people: Any, agent: Any, tagged: Any, site_b_down: int
) -> None:
    old = sim.read_file("db01", PATH)
    recovery = _approved_request(agent, people, tagged)
    sim.set_file("db01", PATH, text="broken by the agent\n")
    seen = sim.requests_seen("site-b")

    recovery_request_approve(recovery_id=recovery.pk, user=people.approver)  # approving is still allowed
    recovery = _wait_waiting(inline_tasks, recovery)

    assert recovery.status == RecoveryRequest.Status.WAITING
    assert sim.requests_seen("site-b") == seen  # the run never waited for the hung ZVM
    assert recovery.site_unavailable_since is not None
    assert "did not answer" in recovery.site_unavailable_reason
    waiting = recovery_dict(recovery)["waiting_for_site"]
    assert waiting["site"] == "Site B"
    assert waiting["message"].startswith("waiting for site Site B, unavailable since ")
    assert recovery_agent_out(recovery).waiting_for_site is not None  # zerto_recovery_status shows it too
    [parked] = AuditEvent.objects.filter(action=RecoveryAction.WAITING_FOR_SITE, target_id=str(recovery.pk))
    assert parked.data["recovery_site"] == "Site B"
    assert recoveries_resume_waiting().still_waiting == 1  # still down: nothing is queued

    admin = Client()
    admin.force_login(people.approver)
    page = admin.get(f"/admin/recoveries/recoveryrequest/{recovery.pk}/review/").content.decode()
    assert "waiting for site Site B, unavailable since" in page
    assert admin.get(f"/api/recoveries/{recovery.pk}/").json()["waiting_for_site"]["site"] == "Site B"

    sim.clear_faults()
    _trial_due_now(sites["site-b"])
    assert sites_probe().probed == {"Site B": "available"}
    assert recoveries_resume_waiting().queued == 1
    assert recoveries_resume_waiting().queued == 0  # queued once, not per sweep
    recovery = wait_recovery_finished(recovery, tasks=inline_tasks)

    assert recovery.status == RecoveryRequest.Status.SUCCEEDED, recovery.error
    assert Path(recovery.stored_path).read_bytes() == old
    assert recovery.site_unavailable_since is None
    actions = _actions(recovery)
    assert actions.index(RecoveryAction.WAITING_FOR_SITE) < actions.index(RecoveryAction.RESUMED)
    assert actions[-1] == RecoveryAction.SUCCEEDED


def test_a_run_still_waiting_when_the_request_expires_fails_saying_so(
    inline_tasks: InlineTasks, sim: Any, sites: dict[str, Site], people: Any, agent: Any, tagged: Any, site_b_down: int
) -> None:
    recovery = _approved_request(agent, people, tagged)
    recovery_request_approve(recovery_id=recovery.pk, user=people.approver)
    recovery = _wait_waiting(inline_tasks, recovery)
    assert recovery.status == RecoveryRequest.Status.WAITING

    report = recoveries_resume_waiting(now=recovery.expires_at + timedelta(seconds=1))
    assert report.expired == 1
    recovery.refresh_from_db()
    assert recovery.status == RecoveryRequest.Status.FAILED
    assert recovery.ok is False
    assert "expired" in recovery.error
    assert "Site B was still unavailable" in recovery.error
    assert "nothing was mounted" in recovery.error
    assert recovery_dict(recovery)["result"]["error"] == recovery.error
    failed = AuditEvent.objects.get(action=RecoveryAction.FAILED, target_id=str(recovery.pk))
    assert failed.data["by"] == "expiry"
    # A run queued before the expiry that arrives late does nothing.
    assert recovery_run(recovery_id=recovery.pk, request_id="late") == RecoveryRequest.Status.FAILED
    sim.clear_faults()


def test_an_approved_run_whose_message_was_lost_is_queued_again_by_the_sweep(
    inline_tasks: InlineTasks, sim: Any, sites: dict[str, Site], people: Any, agent: Any, tagged: Any
) -> None:
    recovery = _approved_request(agent, people, tagged)
    recovery_request_approve(recovery_id=recovery.pk, user=people.approver)
    assert inline_tasks.lose("recoveries.run") == 1  # the task queue restarted and kept nothing
    assert recoveries_resume_waiting().requeued_approved == 0, "just approved: a slow queue, not a lost message"
    RecoveryRequest.objects.filter(pk=recovery.pk).update(decided_at=timezone.now() - timedelta(seconds=61))
    assert recoveries_resume_waiting().requeued_approved == 1
    assert recoveries_resume_waiting().requeued_approved == 0, "queued once, not per sweep"
    recovery = wait_recovery_finished(recovery, tasks=inline_tasks)
    assert recovery.status == RecoveryRequest.Status.SUCCEEDED, recovery.error
    assert AuditEvent.objects.filter(action=RecoveryAction.STARTED, target_id=str(recovery.pk)).count() == 1
