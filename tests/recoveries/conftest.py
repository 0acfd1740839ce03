"""Fixtures for recoveries: every test looks up afresh."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _fresh_lookups(fresh_lookups: None) -> None:
    pass
