"""Per-agent rate limits: per process, shared through Redis across workers, and Redis going away."""

from __future__ import annotations

import logging
import os
import uuid
from typing import Any

import pytest
import redis

from rewind.mcp.models import McpRateCount
from rewind.mcp.ratelimit import KEY_PREFIX, DbRateLimiter, LocalRateLimiter, RedisRateLimiter, rate_limiter
from rewind.processes import free_port
from tests.helpers import call_body, post, run
from tests.mcpfixtures import make_agent_token, run_uvicorn


def _redis_url() -> str:
    """The suite's Redis (CI sets REDIS_URL); else the machine's own, on a database of its own."""
    return os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/15"


@pytest.fixture
def redis_url() -> str:
    url = _redis_url()
    try:
        redis.Redis.from_url(url, socket_connect_timeout=1).ping()
    except redis.RedisError:
        pytest.skip("no Redis server answers at REDIS_URL or 127.0.0.1:6379: the shared limit needs one")
    return url


def _takes(limiter: Any, key: str, n: int) -> list[float]:
    async def many() -> list[float]:
        return [await limiter.take(key) for _ in range(n)]

    return run(many())


def test_a_local_limit_allows_a_burst_of_the_limit_then_says_how_long_to_wait() -> None:
    limiter = LocalRateLimiter(per_minute=3)
    waits = _takes(limiter, "bot", 4)
    assert waits[:3] == [0.0, 0.0, 0.0]
    assert 0 < waits[3] <= 20  # one call comes back every 60/3 s
    assert _takes(limiter, "other-bot", 1) == [0.0], "each agent has its own count"


def test_two_workers_share_one_count_in_redis(redis_url: str) -> None:
    agent = f"bot-{uuid.uuid4().hex}"
    workers = [RedisRateLimiter(redis_url, per_minute=5), RedisRateLimiter(redis_url, per_minute=5)]

    async def alternate() -> list[float]:
        return [await workers[i % 2].take(agent) for i in range(7)]

    waits = run(alternate())
    assert waits[:5] == [0.0] * 5
    assert all(0 < w <= 12 for w in waits[5:]), waits  # one call comes back every 60/5 s
    ttl_ms = redis.Redis.from_url(redis_url).pttl(KEY_PREFIX + agent)
    assert 0 < ttl_ms <= 61_000, "the count must not outlive a minute"


def test_without_redis_it_counts_per_process_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    url = f"redis://:s3cret-pass@127.0.0.1:{free_port()}/0"  # nothing listens there
    limiter = RedisRateLimiter(url, per_minute=2)
    with caplog.at_level(logging.WARNING, logger="rewind.mcp.ratelimit"):
        waits = _takes(limiter, "bot", 3)
    assert waits[:2] == [0.0, 0.0]
    assert waits[2] > 0
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1
    assert "counted per process" in warnings[0]
    assert "s3cret" not in caplog.text


def test_the_setting_picks_the_counter() -> None:
    assert isinstance(rate_limiter(10, None), DbRateLimiter)
    assert isinstance(rate_limiter(10, "redis://127.0.0.1:6379/15"), RedisRateLimiter)


def test_two_workers_share_one_count_in_the_database(transactional_db: None) -> None:
    agent = f"bot-{uuid.uuid4().hex}"
    workers = [DbRateLimiter(per_minute=5), DbRateLimiter(per_minute=5)]

    async def alternate() -> list[float]:
        return [await workers[i % 2].take(agent) for i in range(7)]

    waits = run(alternate())
    assert waits[:5] == [0.0] * 5
    assert all(0 < w <= 12 for w in waits[5:]), waits  # one call comes back every 60/5 s
    assert McpRateCount.objects.filter(key=agent).count() == 1
    assert run(workers[0].take("other-bot")) == 0.0, "each agent has its own count"


def test_a_database_count_gives_a_call_back_after_the_interval(transactional_db: None, monkeypatch: Any) -> None:
    limiter = DbRateLimiter(per_minute=2)
    now = [1_800_000_000_000_000]
    monkeypatch.setattr("rewind.mcp.ratelimit._now_us", lambda: now[0])
    assert [limiter.take_now("bot") for _ in range(3)] == [0.0, 0.0, pytest.approx(30.0)]
    assert limiter.take_now("bot") == pytest.approx(30.0)  # still refused: refusals do not count
    now[0] += 30_000_000
    assert limiter.take_now("bot") == 0.0
    assert limiter.take_now("bot") == pytest.approx(30.0)


def test_without_the_database_it_counts_per_process_and_says_so(
    transactional_db: None, monkeypatch: Any, caplog: pytest.LogCaptureFixture
) -> None:
    from django.db import OperationalError

    limiter = DbRateLimiter(per_minute=2)

    def broken(key: str) -> float:
        raise OperationalError("database is locked")

    monkeypatch.setattr(limiter, "take_now", broken)
    with caplog.at_level(logging.WARNING, logger="rewind.mcp.ratelimit"):
        waits = _takes(limiter, "bot", 3)
    assert waits[:2] == [0.0, 0.0]
    assert waits[2] > 0
    assert next(r.getMessage() for r in caplog.records).startswith("rate limits are counted per process")


@pytest.mark.process
def test_the_endpoint_counts_once_for_two_workers_without_redis(
    tmp_path: Any, transactional_db: None, sim: Any
) -> None:
    from tests.fixtures import register_sites
    from tests.helpers import test_database_url

    register_sites(sim, {"Site A": "site-a"})
    agent, token = make_agent_token()
    limit = 4
    env = {"MCP_RATE_LIMIT_PER_MINUTE": str(limit), "REDIS_URL": ""}
    with run_uvicorn(tmp_path, database_url=test_database_url(), workers=2, env=env) as server:
        # New connections, which either worker may take; with per-process counts two workers
        # would let through up to twice the limit.
        statuses = [post(server.mcp_url, call_body(rpc_id=i), token).status_code for i in range(2 * limit + 2)]
        log = server.log.read_text()
    assert statuses == [200] * limit + [429] * (limit + 2)
    assert McpRateCount.objects.filter(key=agent.name).exists()
    assert "counted per process" not in log


@pytest.mark.process
def test_the_endpoint_counts_in_redis_when_it_is_configured(
    tmp_path: Any, transactional_db: None, sim: Any, redis_url: str
) -> None:
    from tests.fixtures import register_sites
    from tests.helpers import test_database_url

    register_sites(sim, {"Site A": "site-a"})
    agent, token = make_agent_token()
    limit = 3
    with run_uvicorn(
        tmp_path,
        database_url=test_database_url(),
        workers=2,
        env={"MCP_RATE_LIMIT_PER_MINUTE": str(limit), "REDIS_URL": redis_url},
    ) as server:
        statuses = [post(server.mcp_url, call_body(rpc_id=i), token).status_code for i in range(limit + 3)]
    # Each call comes on a new connection, which either worker may take: together they allow the limit.
    assert statuses == [200] * limit + [429] * 3
    assert redis.Redis.from_url(redis_url).exists(KEY_PREFIX + agent.name)


def test_a_closed_event_loop_does_not_keep_its_redis_client(redis_url: str) -> None:
    limiter = RedisRateLimiter(redis_url, per_minute=100)
    for _ in range(3):
        assert run(limiter.take(f"bot-{uuid.uuid4().hex}")) == 0.0
    assert limiter._link.event_loops_held() == 1
