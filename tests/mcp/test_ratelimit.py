"""Per-agent rate limits: exact in any 60 s, per process, shared through Redis or the database, and a store going away."""

from __future__ import annotations

import itertools
import logging
import os
import time
import uuid
from typing import Any
from unittest import mock

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from rewind.lib.processes import free_port
from rewind.lib.sharedstore import DbStore, RedisStore
from rewind.mcp.models import McpRateCall, McpRateCount
from rewind.mcp.ratelimit import (
    KEY_PREFIX,
    MINUTE_US,
    LocalRateLimiter,
    RateLimit,
    SharedRateLimiter,
    decide_in_db,
    rate_limiter,
)
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


def _redis_limiter(url: str, limit: RateLimit) -> SharedRateLimiter:
    return SharedRateLimiter(limit, RedisStore(url))


def _db_limiter(limit: RateLimit) -> SharedRateLimiter:
    return SharedRateLimiter(limit, DbStore())


def _take_now(limit: RateLimit, key: str) -> float:
    """One call decided in the database at once, in a transaction of its own."""
    return decide_in_db(limit, [key])[0]


def _takes(limiter: Any, key: str, n: int) -> list[float]:
    async def many() -> list[float]:
        return [await limiter.take(key) for _ in range(n)]

    return run(many())


def test_a_local_limit_allows_the_limit_then_says_how_long_to_wait() -> None:
    limiter = LocalRateLimiter(RateLimit(3))
    waits = _takes(limiter, "bot", 4)
    assert waits[:3] == [0.0, 0.0, 0.0]
    assert 59 < waits[3] <= 60.3  # the window: the first call leaves it a minute after it came
    assert _takes(limiter, "other-bot", 1) == [0.0], "each agent has its own count"


def test_two_workers_share_one_count_in_redis(redis_url: str) -> None:
    agent = f"bot-{uuid.uuid4().hex}"
    workers = [_redis_limiter(redis_url, RateLimit(5)), _redis_limiter(redis_url, RateLimit(5))]

    async def alternate() -> list[float]:
        return [await workers[i % 2].take(agent) for i in range(7)]

    waits = run(alternate())
    assert waits[:5] == [0.0] * 5
    assert all(59 < w <= 60.3 for w in waits[5:]), waits  # no call comes back before the window passed
    ttl_ms = redis.Redis.from_url(redis_url).pttl(KEY_PREFIX + agent)
    assert 0 < ttl_ms <= 61_300, "the count must not outlive its window"


def test_without_redis_it_counts_per_process_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    url = f"redis://:s3cret-pass@127.0.0.1:{free_port()}/0"  # nothing listens there
    limiter = _redis_limiter(url, RateLimit(2))
    with caplog.at_level(logging.WARNING, logger="rewind.mcp.ratelimit"):
        waits = _takes(limiter, "bot", 3)
    assert waits[:2] == [0.0, 0.0]
    assert waits[2] > 0
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1
    assert "counted per process" in warnings[0]
    assert "s3cret" not in caplog.text


def test_the_setting_picks_the_counter() -> None:
    assert isinstance(rate_limiter(RateLimit(10), None).store, DbStore)
    assert isinstance(rate_limiter(RateLimit(10), "redis://127.0.0.1:6379/15").store, RedisStore)


def test_two_workers_share_one_count_in_the_database(transactional_db: None) -> None:
    agent = f"bot-{uuid.uuid4().hex}"
    workers = [_db_limiter(RateLimit(5)), _db_limiter(RateLimit(5))]

    async def alternate() -> list[float]:
        return [await workers[i % 2].take(agent) for i in range(7)]

    waits = run(alternate())
    assert waits[:5] == [0.0] * 5
    assert all(59 < w <= 60.3 for w in waits[5:]), waits  # no call comes back before the window passed
    assert McpRateCount.objects.filter(key=agent).count() == 1
    assert McpRateCall.objects.filter(key=agent).count() == 5, "refused calls are not counted"
    assert run(workers[0].take("other-bot")) == 0.0, "each agent has its own count"


def test_a_database_count_gives_a_call_back_once_the_window_passed(transactional_db: None, monkeypatch: Any) -> None:
    limit = RateLimit(2)
    now = [1_800_000_000_000_000]
    monkeypatch.setattr("rewind.mcp.ratelimit._now_us", lambda: now[0])
    assert [_take_now(limit, "bot") for _ in range(3)] == [0.0, 0.0, pytest.approx(60.2, abs=0.001)]
    now[0] += 30_000_000
    assert _take_now(limit, "bot") == pytest.approx(30.2, abs=0.001)  # still refused: refusals do not count
    now[0] += 30_300_000
    assert _take_now(limit, "bot") == 0.0
    assert _take_now(limit, "bot") == 0.0
    assert _take_now(limit, "bot") == pytest.approx(60.2, abs=0.001)
    assert McpRateCall.objects.filter(key="bot").count() == 2, "calls out of the window are forgotten"


def test_a_database_count_under_a_high_limit_keeps_the_window_s_calls_and_reads_them_only_at_the_limit(
    transactional_db: None, monkeypatch: Any
) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    limit = RateLimit(100_000)
    now = [1_800_000_000_000_000]
    monkeypatch.setattr("rewind.mcp.ratelimit._now_us", lambda: now[0])
    for _ in range(300):
        now[0] += 1000
        assert _take_now(limit, "busy") == 0.0
    with CaptureQueriesContext(connection) as queries:
        _take_now(limit, "busy")
    assert not [q for q in queries if "OFFSET" in q["sql"]], "below the limit no call is read back"
    assert McpRateCount.objects.get(key="busy").calls == McpRateCall.objects.filter(key="busy").count() == 301
    # Calls at 1..300 ms and one more at 300 ms; 60.05 s later the window begins at 150 ms.
    now[0] += MINUTE_US + 200_000 - 150_000
    assert _take_now(limit, "busy") == 0.0
    assert McpRateCount.objects.get(key="busy").calls == McpRateCall.objects.filter(key="busy").count() == 151 + 1 + 1


def test_a_database_count_higher_than_the_calls_kept_is_set_right_at_the_limit(transactional_db: None) -> None:
    limit = RateLimit(3)
    assert [_take_now(limit, "bot") for _ in range(3)] == [0.0, 0.0, 0.0]
    McpRateCall.objects.filter(key="bot").order_by("at")[:1].get().delete()  # by hand: the count says 3, 2 are kept
    assert _take_now(limit, "bot") == 0.0, "the count is not a refusal: the calls kept are"
    assert McpRateCount.objects.get(key="bot").calls == McpRateCall.objects.filter(key="bot").count() == 3
    assert _take_now(limit, "bot") > 59


def _counting_batches(limiter: SharedRateLimiter, monkeypatch: Any) -> list[list[str]]:
    """The keys of each trip the limiter makes to its shared count, as they are made."""
    batches: list[list[str]] = []
    decide = limiter._gatherer._decide

    async def counted(keys: list[str]) -> list[float]:
        batches.append(list(keys))
        return await decide(keys)

    monkeypatch.setattr(limiter._gatherer, "_decide", counted)
    return batches


def test_a_burst_on_one_loop_is_decided_in_a_few_redis_scripts_each_agent_exactly(
    redis_url: str, monkeypatch: Any
) -> None:
    import asyncio

    limiter = _redis_limiter(redis_url, RateLimit(5))
    batches = _counting_batches(limiter, monkeypatch)
    run_id = uuid.uuid4().hex
    agents = [f"{name}-{run_id}" for name in ("b-bot", "a-bot", "c-bot")] * 10

    async def burst() -> list[float]:
        return list(await asyncio.gather(*(limiter.take(agent) for agent in agents)))

    waits = run(burst())
    client = redis.Redis.from_url(redis_url)
    for agent in set(agents):
        mine = [w for a, w in zip(agents, waits, strict=True) if a == agent]
        assert mine[:5] == [0.0] * 5, (agent, mine)  # the first five, in the order they came
        assert all(w > 59 for w in mine[5:]), (agent, mine)
        assert client.llen(KEY_PREFIX + agent) == 5
    assert sum(len(b) for b in batches) == 30
    assert len(batches) <= 2, "the first call's own script, then everyone who came meanwhile"


@pytest.mark.process
def test_a_real_redis_restart_is_counted_per_process_meanwhile_then_in_redis_again(
    tmp_path: Any, monkeypatch: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Batches of calls on one event loop, across a restart of a Redis of the test's own: the batch
    that finds it gone is counted in the process (said once), and once the retry time passed the
    same loop's calls are counted in Redis again, on connections opened anew."""
    import asyncio

    from rewind.lib import sharedstore
    from tests.stackfixtures import RedisServer

    monkeypatch.setattr(sharedstore, "RETRY_AFTER_FAILURE_S", 1.0)  # the outage's retry, shortened
    server = RedisServer(tmp_path)
    limiter = _redis_limiter(server.url(), RateLimit(100))

    async def burst() -> list[float]:
        return list(await asyncio.gather(*(limiter.take("bot", others_open=True) for _ in range(5))))

    async def across_a_restart() -> list[list[float]]:
        before = await burst()
        server.stop()
        during = await burst()
        server.start()
        await asyncio.sleep(1.2)  # the retry time (1 s, above) must pass: what the test is about
        return [before, during, await burst()]

    try:
        with caplog.at_level(logging.WARNING, logger="rewind.mcp.ratelimit"):
            before, during, after = run(across_a_restart())
        assert before == during == after == [0.0] * 5
        warnings = [r.getMessage() for r in caplog.records if r.name == "rewind.mcp.ratelimit"]
        assert len(warnings) == 1, warnings
        assert "counted per process" in warnings[0]
        # The restarted Redis kept nothing: what it holds is the calls after it came back.
        assert redis.Redis.from_url(server.url()).llen(KEY_PREFIX + "bot") == 5
    finally:
        server.stop()


def test_a_redis_list_under_a_high_limit_holds_only_the_window_s_calls(redis_url: str) -> None:
    agent = f"bot-{uuid.uuid4().hex}"
    client = redis.Redis.from_url(redis_url)
    client.rpush(KEY_PREFIX + agent, *[str(1_000_000 + i) for i in range(500)])  # calls of long ago
    limiter = _redis_limiter(redis_url, RateLimit(100_000))
    assert run(limiter.take(agent)) == 0.0
    assert client.llen(KEY_PREFIX + agent) == 1, "calls older than the window are dropped"


def test_a_burst_on_one_loop_is_decided_in_a_few_transactions_each_agent_exactly(
    transactional_db: None, monkeypatch: Any
) -> None:
    import asyncio

    limiter = _db_limiter(RateLimit(5))
    batches = _counting_batches(limiter, monkeypatch)
    agents = ["b-bot", "a-bot", "c-bot"] * 10  # interleaved, the rows locked in another order than they came

    async def burst() -> list[float]:
        return list(await asyncio.gather(*(limiter.take(agent) for agent in agents)))

    waits = run(burst())
    for agent in set(agents):
        mine = [w for a, w in zip(agents, waits, strict=True) if a == agent]
        assert mine[:5] == [0.0] * 5, (agent, mine)  # the first five, in the order they came
        assert all(w > 59 for w in mine[5:]), (agent, mine)
        assert McpRateCall.objects.filter(key=agent).count() == 5
        assert McpRateCount.objects.get(key=agent).calls == 5
    assert sum(len(b) for b in batches) == 30
    assert len(batches) <= 2, "the first call's own decision, then everyone who came meanwhile"


def test_calls_arriving_while_other_requests_are_open_are_gathered_into_one_decision(
    transactional_db: None, monkeypatch: Any
) -> None:
    """Clients send their next call when one ends: with other requests under way, the first call's
    decision waits the gather window for theirs, and one transaction decides all of them."""
    import asyncio

    from rewind.mcp import ratelimit

    monkeypatch.setattr(ratelimit, "GATHER_WINDOW_S", 0.5)  # wide, so a slow machine still lands inside it
    limiter = _db_limiter(RateLimit(5))
    batches = _counting_batches(limiter, monkeypatch)

    async def staggered() -> list[float]:
        first = asyncio.ensure_future(limiter.take("bot", others_open=True))
        await asyncio.sleep(0.05)  # the first call's decision would be long done without the window
        rest = [limiter.take("bot", others_open=True) for _ in range(5)]
        return list(await asyncio.gather(first, *rest))

    waits = run(staggered())
    assert waits[:5] == [0.0] * 5
    assert waits[5] > 59, "gathered calls are still counted one by one, in the order they came"
    assert batches == [["bot"] * 6]
    assert McpRateCount.objects.get(key="bot").calls == McpRateCall.objects.filter(key="bot").count() == 5


def test_a_lone_call_is_decided_at_once(transactional_db: None, monkeypatch: Any) -> None:
    import asyncio

    from rewind.mcp import ratelimit

    monkeypatch.setattr(ratelimit, "GATHER_WINDOW_S", 60.0)  # a lone call that waited would time out below
    limiter = _db_limiter(RateLimit(5))
    assert run(asyncio.wait_for(limiter.take("bot"), timeout=10)) == 0.0
    assert McpRateCall.objects.filter(key="bot").count() == 1


def test_without_the_database_it_counts_per_process_and_says_so(
    transactional_db: None, monkeypatch: Any, caplog: pytest.LogCaptureFixture
) -> None:
    from django.db import OperationalError

    limiter = _db_limiter(RateLimit(2))

    def broken(limit: RateLimit, keys: list[str]) -> list[float]:
        raise OperationalError("database is locked")

    monkeypatch.setattr("rewind.mcp.ratelimit.decide_in_db", broken)
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
    store = RedisStore(redis_url)
    limiter = SharedRateLimiter(RateLimit(100), store)
    for _ in range(3):
        assert run(limiter.take(f"bot-{uuid.uuid4().hex}")) == 0.0
    assert store.link.event_loops_held() == 1


def test_a_burst_of_calls_on_one_loop_is_counted_in_redis_not_per_process(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """150 calls at once (120 agents starting together reach one replica so): each waits for one of
    the loop's few connections. The client's own pool refused a 101st connection, which read as
    Redis not answering and switched every limit to per-process counting for 10 s."""
    import asyncio

    from rewind.lib.sharedstore import LOOP_CONNECTIONS

    store = RedisStore(redis_url)
    limiter = SharedRateLimiter(RateLimit(1000), store)
    agent = f"bot-{uuid.uuid4().hex}"

    async def burst() -> tuple[list[float], int]:
        waits = await asyncio.gather(*(limiter.take(agent) for _ in range(150)))
        pool = store.link._loops[asyncio.get_running_loop()].client.connection_pool
        return list(waits), len(pool._available_connections) + len(pool._in_use_connections)

    with caplog.at_level(logging.WARNING, logger="rewind.mcp.ratelimit"):
        waits, opened = run(burst())
    assert waits == [0.0] * 150
    assert "per process" not in caplog.text
    assert limiter._fallback.up()
    assert redis.Redis.from_url(redis_url).llen(KEY_PREFIX + agent) == 150, "every call counted in Redis"
    assert opened <= LOOP_CONNECTIONS


def _accepted_at(limit: RateLimit, arrivals_us: list[int]) -> list[int]:
    """The arrivals a per-process counter lets through, on a clock the test moves."""
    limiter = LocalRateLimiter(limit)
    accepted = []
    for at in arrivals_us:
        with mock.patch("rewind.mcp.ratelimit.time.monotonic_ns", return_value=at * 1000):
            if limiter.take_now("bot") == 0.0:
                accepted.append(at)
    return accepted


def _most_in_any_minute(times_us: list[int]) -> int:
    most, start = 0, 0
    for end, at in enumerate(times_us):
        while at - times_us[start] > MINUTE_US:  # a closed window of 60 s: [t, t + 60 s]
            start += 1
        most = max(most, end - start + 1)
    return most


def test_an_agent_paced_above_the_limit_gets_at_most_the_limit_in_any_minute() -> None:
    """The case a bucket got wrong: 600 a minute, an agent at 20 calls/s for 2 minutes."""
    arrivals = [i * 50_000 for i in range(20 * 120)]
    accepted = _accepted_at(RateLimit(600), arrivals)
    assert _most_in_any_minute(accepted) == 600
    assert len([a for a in accepted if a < 60_000_000]) == 600  # a bucket let 1,199 through here
    assert len([a for a in accepted if a < 20_000_000]) == 400  # and 793 in the first 20 s (all 400 sent)


@settings(max_examples=200, deadline=None)
@given(
    per_minute=st.integers(1, 30),
    burst=st.one_of(st.none(), st.integers(1, 30)),
    gaps=st.lists(st.integers(0, 8_000_000), min_size=1, max_size=120),
)
def test_no_minute_ever_holds_more_than_the_limit_and_a_refusal_is_always_owed(
    per_minute: int, burst: int | None, gaps: list[int]
) -> None:
    limit = RateLimit(per_minute, None if burst is None else min(burst, per_minute))
    arrivals = list(itertools.accumulate(gaps, initial=10**12))[1:]
    accepted = _accepted_at(limit, arrivals)
    assert _most_in_any_minute(accepted) <= per_minute
    if limit.burst is None:
        # Never stricter than the window: a refused arrival had the limit's calls in the minute before it.
        accepted_set = set(accepted)
        for at in arrivals:
            if at not in accepted_set:
                recent = [a for a in accepted if at - limit.window_us <= a <= at]
                assert len(recent) >= per_minute


def test_a_burst_setting_paces_calls_within_the_window() -> None:
    limit = RateLimit(60, burst=5)
    accepted = _accepted_at(limit, [i * 1000 for i in range(20)])  # 20 calls within 20 ms
    assert len(accepted) == 5
    assert "bursts of at most 5 at once (MCP_RATE_LIMIT_BURST)" in limit.describe()
    later = _accepted_at(limit, [i * 1_000_000 for i in range(60)])  # one a second: the steady pace
    assert len(later) == 60


@pytest.mark.process
def test_the_endpoint_says_to_wait_for_the_window_and_survives_a_deeply_nested_body(
    tmp_path: Any, transactional_db: None, sim: Any
) -> None:
    from tests.fixtures import register_sites
    from tests.helpers import test_database_url

    register_sites(sim, {"Site A": "site-a"})
    _, token = make_agent_token()
    limit = 10
    env = {"MCP_RATE_LIMIT_PER_MINUTE": str(limit), "REDIS_URL": ""}
    with run_uvicorn(tmp_path, database_url=test_database_url(), workers=2, env=env) as server:
        started = time.monotonic()
        statuses = [post(server.mcp_url, call_body(rpc_id=i), token).status_code for i in range(limit)]
        refused = post(server.mcp_url, call_body(rpc_id=99), token)
        took = time.monotonic() - started
        nested = post(server.mcp_url, b"[" * 5000 + b"]" * 5000, token)
        log = server.log.read_text()
    assert statuses == [200] * limit
    assert refused.status_code == 429
    # The first call leaves the window a minute after it came, less what the calls took since
    # (a bucket said 6 s: 60/10).
    assert 60 - took <= int(refused.headers["retry-after"]) <= 61
    message = refused.json()["error"]["message"]
    assert f"at most {limit} requests in any 60 s (MCP_RATE_LIMIT_PER_MINUTE)" in message
    assert nested.status_code == 429, nested.text  # was a 500 and a RecursionError in the log
    assert nested.json()["id"] is None
    assert "Traceback" not in log


@pytest.mark.process
def test_the_database_count_is_shared_again_at_once_after_a_real_postgresql_restart(tmp_path: Any) -> None:
    """Without Redis the count lives in PostgreSQL; restarted under the endpoint, the next calls are counted there.

    The rate count keeps connections of its own threads: a restart ends them all, and a thread
    that used its dead connection would count per process (each worker allowing the limit again)
    until it tried the database again.
    """
    import subprocess

    from tests.simfixtures import PYTHON, REPO
    from tests.stackfixtures import PostgresServer

    postgres = PostgresServer()
    try:
        postgres.create_database("rewind")
        env = {
            **{k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")},
            "DATABASE_URL": postgres.url(),
            "REDIS_URL": "",
            "REWIND_VAR_DIR": str(tmp_path / "var"),
        }

        def manage(*args: str) -> str:
            done = subprocess.run(
                [PYTHON, "manage.py", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=180
            )
            assert done.returncode == 0, done.stderr[-3000:]
            return done.stdout

        manage("migrate", "-v0")
        env["DJANGO_SUPERUSER_PASSWORD"] = uuid.uuid4().hex
        manage("createsuperuser", "--noinput", "--username", "owner", "--email", "owner@example.com")
        token = manage("createagent", "rate-restart").strip().splitlines()[-1]
        limit = 6
        server_env = {"MCP_RATE_LIMIT_PER_MINUTE": str(limit), "REDIS_URL": "", "REWIND_VAR_DIR": env["REWIND_VAR_DIR"]}
        with run_uvicorn(tmp_path, database_url=postgres.url(), workers=2, env=server_env) as server:
            before = [post(server.mcp_url, call_body(rpc_id=i), token).status_code for i in range(2)]
            postgres.restart(down_s=1.0)
            after = [post(server.mcp_url, call_body(rpc_id=i), token).status_code for i in range(limit + 2)]
            log = server.log.read_text()
        psql = ["psql", "-h", "127.0.0.1", "-p", str(postgres.port), "-U", "postgres", "-d", "rewind", "-At"]
        counted = subprocess.run(
            [*psql, "-c", "SELECT calls FROM rewind_mcpratecount WHERE key = 'rate-restart'"],
            check=True,
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout.strip()
    finally:
        postgres.remove()
    assert before == [200, 200]
    assert after == [200] * (limit - 2) + [429] * 4, "both workers count in the database again, from where it was"
    assert "counted per process" not in log
    assert counted == str(limit)
