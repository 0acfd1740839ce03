"""Clients of the ZVM client's own tests, pointed at the simulator over real HTTPS."""

from __future__ import annotations

from typing import Any

import pytest

from rewind.zvm import ZvmClient
from tests.helpers import connection
from tests.simfixtures import SimHandle
from tests.zvm.support import MakeClient


@pytest.fixture
def make_client(sim: SimHandle) -> MakeClient:
    """``make_client(slug="site-a", **connection fields)`` → a fresh ZvmClient."""

    def make(slug: str = "site-a", **kw: Any) -> ZvmClient:
        return ZvmClient(connection(sim, slug, **kw))

    return make
