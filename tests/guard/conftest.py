"""Guard fixtures: the starter catalog, an agent, and a wait helper (sites come from tests.fixtures)."""

from __future__ import annotations

import importlib
from typing import Any

import pytest
from django.contrib.auth.models import User

from rewind.models import Agent, ChangeGuard
from tests.fixtures import InlineTasks, wait_until


@pytest.fixture(autouse=True)
def _no_lookup_cache(settings: Any) -> None:
    # The simulator is reset between tests; a cached lookup from the last test would lie.
    settings.REWIND_LOOKUP_CACHE_S = 0


def install_starter_catalog() -> None:
    """The starter list as its data migration installs it (transactional tests flush it away)."""
    from django.apps import apps

    importlib.import_module("catalog.migrations.0002_starter_list").install(apps, None)


@pytest.fixture(autouse=True)
def _starter_catalog(db: None) -> None:
    install_starter_catalog()


@pytest.fixture
def agent(db: None) -> Agent:
    owner = User.objects.create_user("owner", password="x-owner-pw-123")
    return Agent.objects.create(name="ops-bot", owner=owner)


def wait_finished(guard: ChangeGuard, timeout: float = 60.0, tasks: InlineTasks | None = None) -> ChangeGuard:
    """Until the guard ended: its tasks run here (``tasks``), or the worker runs them in another process."""

    def ended() -> bool:
        guard.refresh_from_db()
        return guard.status in (ChangeGuard.Status.OK, ChangeGuard.Status.FAILED)

    if tasks is not None:
        tasks.wait_for(ended, timeout)
    else:
        wait_until(ended, timeout, what=f"the end of guard {guard.pk}", every=0.1)
    return guard


def tagged(sim: Any, slug: str, vpg_name: str, tag: str) -> list[dict[str, Any]]:
    """The checkpoints with ``tag`` that the simulated ZVM lists for a VPG (raw API rows)."""
    http = sim.http
    base = sim.site_url(slug)
    token = sim.token(slug)
    auth = {"Authorization": f"Bearer {token}"}
    vpgs = http.get(f"{base}/v1/vpgs", params={"name": vpg_name}, headers=auth, timeout=30).json()
    vpg_id = vpgs[0]["VpgIdentifier"]
    rows = http.get(f"{base}/v1/vpgs/{vpg_id}/checkpoints", headers=auth, timeout=30).json()
    return [r for r in rows if r.get("Tag") == tag]
