"""Fixtures for recoveries: every test looks up afresh, and ``agent`` is the shared ``fixer`` (tests.fixtures)."""

from __future__ import annotations

import pytest

from rewind.models import Agent


@pytest.fixture(autouse=True)
def _fresh_lookups(fresh_lookups: None) -> None:
    pass


@pytest.fixture
def agent(fixer: Agent) -> Agent:
    return fixer
