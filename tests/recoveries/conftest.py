"""Fixtures for recoveries: an agent and tagged checkpoints (sites and personas come from tests.fixtures)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from rewind.models import Agent, ChangeGuard, Site
from rewind.protection import protection_cache_clear
from tests.fixtures import People
from tests.helpers import insert_tagged_checkpoint


@pytest.fixture(autouse=True)
def _fresh_lookups(settings: Any, tmp_path: Any) -> None:
    settings.REWIND_LOOKUP_CACHE_S = 0
    protection_cache_clear()


@pytest.fixture
def agent(people: People) -> Agent:
    return Agent.objects.create(name="fixer", owner=people.owner)


@pytest.fixture
def tagged(sim: Any, sites: dict[str, Site]) -> Callable[..., ChangeGuard]:
    def make(vm: str, change_id: str = "chg-1", agent_name: str = "fixer") -> ChangeGuard:
        return insert_tagged_checkpoint(sim, sites, vm, change_id, agent_name)

    return make
