"""Fixtures for the simulator's own tests: a tiny ZVM client (tests.zvmsim.support) per site."""

from __future__ import annotations

import pytest

from tests.simfixtures import SimHandle
from tests.zvmsim.support import Zvm


@pytest.fixture
def zvm_a(sim: SimHandle) -> Zvm:
    return Zvm(sim, "site-a")


@pytest.fixture
def zvm_b(sim: SimHandle) -> Zvm:
    return Zvm(sim, "site-b")
