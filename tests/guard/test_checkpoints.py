from __future__ import annotations

from typing import Any

from rewind.checkpoints.services import checkpoint_request_create
from rewind.models import AuditEvent, ChangeGuard, ChangeGuardVpg
from tests.guard.conftest import tagged, wait_finished


def test_it_checkpoints_every_vpg_of_a_vm_and_waits_until_listed(sim: Any, sites: Any, agent: Any, worker: Any) -> None:
    outcome = checkpoint_request_create(agent_name=agent.name, agent_id=agent.pk, vm="app01", action="edit app.conf")
    assert outcome.created and outcome.guard is not None
    guard = wait_finished(outcome.guard)
    assert guard.status == ChangeGuard.Status.OK, guard.error
    rows = list(guard.vpgs.all())
    assert sorted(r.vpg_name for r in rows) == ["vpg-app-1", "vpg-app-2", "vpg-app-3"]
    assert all(r.status == ChangeGuardVpg.Status.LISTED and r.checkpoint_identifier for r in rows)
    assert len(tagged(sim, "site-a", "vpg-app-3", guard.tag)) == 1
    assert AuditEvent.objects.filter(action="checkpoint.listed").count() == 3
