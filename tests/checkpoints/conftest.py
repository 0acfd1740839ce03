"""Guard fixtures: the starter catalog and an agent (sites come from tests.fixtures)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User

from rewind.models import Agent
from tests.helpers import install_starter_catalog


@pytest.fixture(autouse=True)
def _no_lookup_cache(settings: Any) -> None:
    # The simulator is reset between tests; a cached lookup from the last test would lie.
    settings.REWIND_LOOKUP_CACHE_S = 0


@pytest.fixture(autouse=True)
def _starter_catalog(db: None) -> None:
    install_starter_catalog()


@pytest.fixture
def agent(db: None) -> Agent:
    owner = User.objects.create_user("owner", password="x-owner-pw-123")
    return Agent.objects.create(name="ops-bot", owner=owner)
