"""Clients of the ZVM client's own tests, pointed at the simulator over real HTTPS."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import pytest

from rewind.zvm import ZvmClient, ZvmConnection
from tests.fixtures import wait_until
from tests.simfixtures import CLIENT_ID, PASSWORD, USERNAME, SimHandle

TOKEN_CALL = "POST /auth/realms/zerto/protocol/openid-connect/token"
T = TypeVar("T")

MakeClient = Callable[..., ZvmClient]


def site_name(sim: SimHandle, slug: str) -> str:
    return next(s["name"] for s in sim.state()["sites"] if s["slug"] == slug)


def connection(sim: SimHandle, slug: str = "site-a", **kw: Any) -> ZvmConnection:
    settings: dict[str, Any] = dict(
        site_name=site_name(sim, slug),
        base_url=sim.site_url(slug),
        username=USERNAME,
        password=PASSWORD,
        client_id=CLIENT_ID,
        connect_timeout=5.0,
        read_timeout=30.0,
        backoff_initial=0.01,
        backoff_max=0.05,
    )
    settings.update(kw)
    return ZvmConnection(**settings)


@pytest.fixture
def make_client(sim: SimHandle) -> MakeClient:
    """``make_client(slug="site-a", **connection fields)`` → a fresh ZvmClient."""

    def make(slug: str = "site-a", **kw: Any) -> ZvmClient:
        return ZvmClient(connection(sim, slug, **kw))

    return make


def calls(sim: SimHandle, slug: str, key: str) -> int:
    """How often the simulated site saw ``METHOD /template`` (e.g. ``GET /v1/vpgs``)."""
    return int(sim.calls(slug).get(key, 0))


def wait_for(check: Callable[[], T | None], what: str, timeout: float = 20.0) -> T:
    """Poll ``check`` until it returns something truthy (a bound, not a timing assertion)."""
    return wait_until(check, timeout, what=what)
