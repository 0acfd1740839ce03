"""Fixtures for recoveries: an agent and tagged checkpoints (sites and personas come from tests.fixtures)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.utils import timezone

from recoveries.models import RecoveryRequest
from rewind.models import Agent, ChangeGuard, Site, TaggedCheckpoint
from rewind.protection import protection_cache_clear
from rewind.sites import site_client
from tests.fixtures import InlineTasks, People, wait_until


@pytest.fixture(autouse=True)
def _fresh_lookups(settings: Any, tmp_path: Any) -> None:
    settings.REWIND_LOOKUP_CACHE_S = 0
    protection_cache_clear()


@pytest.fixture
def agent(people: People) -> Agent:
    return Agent.objects.create(name="fixer", owner=people.owner)


def insert_tagged_checkpoint(
    sim: Any, sites: dict[str, Site], vm: str, change_id: str, agent_name: str = "fixer"
) -> ChangeGuard:
    """What the guard does, done by hand: one tagged checkpoint per VPG, recorded as listed."""
    info = sim.vm(vm)
    tag = f"ai:{agent_name} | edit | vm={vm} | change={change_id} | {timezone.now():%Y-%m-%dT%H:%M:%SZ}"
    guard = ChangeGuard.objects.create(
        agent_name=agent_name,
        action="edit",
        vm_identifier=info["identifier"],
        vm_name=info["name"],
        change_id=change_id,
        tag=tag,
        status=ChangeGuard.Status.OK,
        timeout_s=60,
    )
    for vpg in info["vpgs"]:
        client = site_client(sites[vpg["protected"]])
        task_id = client.insert_tagged_checkpoint(vpg["identifier"], tag)
        # The lambdas run before the loop moves on, so binding the loop variables is safe.
        _wait(lambda: client.get_task(task_id).completed)  # noqa: B023
        found = _wait(lambda: next((c for c in client.list_checkpoints(vpg["identifier"]) if c.tag == tag), None))  # noqa: B023
        TaggedCheckpoint.objects.create(
            guard=guard,
            vpg_identifier=vpg["identifier"],
            vpg_name=vpg["name"],
            site=sites[vpg["protected"]],
            protected_site_identifier=sites[vpg["protected"]].identifier,
            recovery_site_identifier=sites[vpg["recovery"]].identifier,
            recovery_site_name=sites[vpg["recovery"]].name,
            checkpoint_identifier=found.identifier,
            checkpoint_timestamp=found.timestamp,
            status=TaggedCheckpoint.Status.LISTED,
        )
    return guard


def _wait(probe: Callable[[], Any], timeout: float = 30.0, tasks: InlineTasks | None = None) -> Any:
    """Wait until ``probe()`` is truthy: running the queued tasks here (``tasks``), or while a worker runs them."""
    if tasks is not None:
        return tasks.wait_for(probe, timeout)
    return wait_until(probe, timeout, every=0.1)


def wait_finished(
    recovery: RecoveryRequest, timeout: float = 180.0, tasks: InlineTasks | None = None
) -> RecoveryRequest:
    """Wait until the run finished, in this process (``tasks``) or in the worker (a bound on a hang, not a speed check)."""

    def done() -> bool:
        recovery.refresh_from_db()
        return recovery.status in (RecoveryRequest.Status.SUCCEEDED, RecoveryRequest.Status.FAILED)

    _wait(done, timeout, tasks)
    return recovery


@pytest.fixture
def tagged(sim: Any, sites: dict[str, Site]) -> Callable[..., ChangeGuard]:
    def make(vm: str, change_id: str = "chg-1", agent_name: str = "fixer") -> ChangeGuard:
        return insert_tagged_checkpoint(sim, sites, vm, change_id, agent_name)

    return make
