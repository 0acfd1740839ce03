"""Guard fixtures: the starter catalog (sites and the agent come from tests.fixtures)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import install_starter_catalog


@pytest.fixture(autouse=True)
def _no_lookup_cache(settings: Any) -> None:
    # The simulator is reset between tests; a cached lookup from the last test would lie.
    settings.REWIND_LOOKUP_CACHE_S = 0


@pytest.fixture(autouse=True)
def _starter_catalog(db: None) -> None:
    install_starter_catalog()
