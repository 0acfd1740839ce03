"""The /mcp fast paths: cache-only protection look-ups, the shared fingerprint read, the audit
writer's gather window, and the frozen start-up heap of a worker."""

from __future__ import annotations

import asyncio
import subprocess
import textwrap
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from rewind.audit import Actor, verify_chain
from rewind.mcp import auditlog
from rewind.mcp.auditlog import AuditWriter, _Pending
from rewind.mcp.context import SharedRead, SharedReads, run_db
from rewind.models import AuditEvent
from rewind.protection import (
    find_protection,
    find_protection_cached,
    protection_cache_clear,
    sites_fingerprint,
)
from rewind.protection import state as protection_state
from tests.fixtures import register_sites
from tests.helpers import find_protection_over_mcp, run
from tests.simfixtures import PYTHON, REPO

WAIT_S = 30.0  # only a bound against hanging forever, never a performance threshold


# --- find_protection_cached ---------------------------------------------------------------
@pytest.fixture
def fresh_cache(settings: Any) -> Iterator[None]:
    settings.REWIND_LOOKUP_CACHE_S = 60.0
    protection_cache_clear()
    yield
    protection_cache_clear()


@pytest.fixture
def two_sites(db: None, sim: Any, fresh_cache: None) -> dict[str, Any]:
    return register_sites(sim, {"Site A": "site-a", "Site B": "site-b"})


class RecordingResolver:
    def __init__(self, answers: dict[str, list[str]] | None = None) -> None:
        self.answers = answers or {}
        self.asked: list[str] = []

    def __call__(self, host: str) -> list[str]:
        self.asked.append(host)
        return self.answers.get(host, [])


def _all_calls(sim: Any) -> dict[str, dict[str, int]]:
    return {slug: sim.calls(slug) for slug in ("site-a", "site-b", "site-c", "site-aws")}


def test_cached_lookup_answers_nothing_before_warming(
    sim: Any, two_sites: Any, monkeypatch: Any, django_assert_num_queries: Any
) -> None:
    resolver = RecordingResolver()
    monkeypatch.setattr("rewind.protection.lookup.dns_resolver", resolver)
    fingerprint = sites_fingerprint()
    before = _all_calls(sim)
    with django_assert_num_queries(0):
        assert find_protection_cached("web01", fingerprint) is None
    assert _all_calls(sim) == before
    assert resolver.asked == []


def test_cached_lookup_returns_what_find_protection_returned(
    sim: Any, two_sites: Any, monkeypatch: Any, django_assert_num_queries: Any
) -> None:
    queries = ["web01", "db01", sim.vm("web01")["identifier"], sim.vm("db01")["identifier"], "DB01"]
    expected = {q: find_protection(q, resolver=RecordingResolver()) for q in queries}
    resolver = RecordingResolver()
    monkeypatch.setattr("rewind.protection.lookup.dns_resolver", resolver)
    fingerprint = sites_fingerprint()
    before = _all_calls(sim)
    with django_assert_num_queries(0):
        answers = {q: find_protection_cached(q, fingerprint) for q in queries}
    assert answers == expected
    assert answers["web01"] is not None
    assert [v.name for v in answers["web01"].vpgs] == ["vpg-web", "vpg-web-dr"]
    assert _all_calls(sim) == before, "a cached lookup called a ZVM"
    assert resolver.asked == []


def test_cached_lookup_never_resolves_a_hostname(sim: Any, two_sites: Any, monkeypatch: Any) -> None:
    warm = RecordingResolver({"fileserver.corp.example": ["10.0.0.21"]})
    assert find_protection("fileserver.corp.example", resolver=warm).vm_name == "win01"
    resolver = RecordingResolver({"fileserver.corp.example": ["10.0.0.21"]})
    monkeypatch.setattr("rewind.protection.lookup.dns_resolver", resolver)
    before = _all_calls(sim)
    # The IP index is warm, but the name → IP step is DNS (I/O): the cached path gives up.
    assert find_protection_cached("fileserver.corp.example", sites_fingerprint()) is None
    assert resolver.asked == []
    assert _all_calls(sim) == before
    # An IP address needs no DNS: once looked up, it is answered from the caches.
    expected = find_protection("10.0.0.21", resolver=warm)
    before = _all_calls(sim)
    assert find_protection_cached("10.0.0.21", sites_fingerprint()) == expected
    assert expected.vm_name == "win01"
    assert resolver.asked == []
    assert _all_calls(sim) == before


def test_a_cached_answer_is_reused_until_the_first_entry_it_was_built_from_expires(
    sim: Any, two_sites: Any, settings: Any, monkeypatch: Any
) -> None:
    settings.REWIND_LOOKUP_CACHE_S = 1.0
    now = [1000.0]
    monkeypatch.setattr(protection_state.cache, "clock", lambda: now[0])
    # Expiry itself is what this test reads: no entry is refreshed ahead of it in the background.
    monkeypatch.setattr(protection_state.cache, "_background", None)
    find_protection("web01")  # caches both sites' directories and web01's rows
    now[0] += 0.2
    find_protection("db01")  # db01's rows are younger than the directories it is answered with
    fingerprint = sites_fingerprint()
    first = find_protection_cached("db01", fingerprint)
    assert first is not None
    assert find_protection_cached("db01", fingerprint) is first
    # Once an entry it was built from is due for its refresh-ahead (half its time gone), the answer
    # is built again from the entries, so that reading them starts the refresh.
    now[0] += 0.4
    again = find_protection_cached("db01", fingerprint)
    assert again is not first
    assert again == first
    # Past the web01-time entries' expiry (but not the db01 rows'), no kept answer is served.
    now[0] += 0.5
    assert find_protection_cached("db01", fingerprint) is None
    assert find_protection("db01") == first


def test_cached_lookup_misses_after_the_cache_is_cleared(sim: Any, two_sites: Any) -> None:
    find_protection("web01")
    fingerprint = sites_fingerprint()
    assert find_protection_cached("web01", fingerprint) is not None
    protection_cache_clear()
    assert find_protection_cached("web01", fingerprint) is None


def test_cached_lookup_misses_once_a_site_changed(sim: Any, two_sites: Any) -> None:
    from rewind.sites import site_update

    find_protection("web01")
    assert find_protection_cached("web01", sites_fingerprint()) is not None
    site_update(actor=Actor.system("tests"), site=two_sites["Site A"], enabled=False)
    assert find_protection_cached("web01", sites_fingerprint()) is None
    # find_protection reads the sites again: only Site B is asked now.
    web = find_protection("web01").vpgs[0]
    assert web.protected_site.configured is False
    assert not web.can_insert_checkpoint
    fingerprint = sites_fingerprint()
    assert find_protection_cached("web01", fingerprint) == find_protection("web01")
    site_update(actor=Actor.system("tests"), site=two_sites["Site B"], username="someone-else")
    assert find_protection_cached("web01", sites_fingerprint()) is None


# --- a site change is seen by the next MCP call ---------------------------------------------
def test_a_disabled_site_is_seen_by_the_next_tool_call(
    sim: Any, mcp_sites: Any, agent_token: Any, mcp_client: Any
) -> None:
    from rewind.sites import site_update

    _, token = agent_token

    def vpgs(vm: str) -> dict[str, Any]:
        _, result = run(find_protection_over_mcp(mcp_client, token, "auto", vm))
        assert not result.is_error, result.content
        return {v["name"]: v for v in result.structured_content["vpgs"]}

    # Several calls each, so both uvicorn workers have everything cached.
    for _ in range(4):
        assert sorted(vpgs("app01")) == ["vpg-app-1", "vpg-app-2", "vpg-app-3"]
        assert vpgs("web01")["vpg-web"]["can_insert_checkpoint"] is True
    site_update(actor=Actor.system("tests"), site=mcp_sites["Site A"], enabled=False)
    for _ in range(4):
        # vpg-app-3 (site-a → site-c) is listed only by Site A's ZVM.
        assert sorted(vpgs("app01")) == ["vpg-app-1", "vpg-app-2"]
        web = vpgs("web01")["vpg-web"]
        assert web["protected_site"]["configured_here"] is False
        assert web["can_insert_checkpoint"] is False
        assert "not configured here" in web["cannot_insert_reason"]


# --- SharedRead -------------------------------------------------------------------------------
class GatedRead:
    """A read function that blocks until released and counts its calls; the n-th call returns n."""

    def __init__(self, fail_on: int | None = None) -> None:
        self.calls = 0
        self.fail_on = fail_on
        self.entered = threading.Semaphore(0)
        self.gate = threading.Semaphore(0)

    def __call__(self) -> int:
        self.calls += 1
        n = self.calls
        self.entered.release()
        if not self.gate.acquire(timeout=WAIT_S):
            raise RuntimeError("never released")
        if n == self.fail_on:
            raise ValueError(f"read {n} failed")
        return n

    async def wait_entered(self) -> None:
        loop = asyncio.get_running_loop()
        assert await loop.run_in_executor(None, self.entered.acquire, True, WAIT_S), "the read never started"

    def release(self) -> None:
        self.gate.release()


async def _settle() -> None:
    # Let every created task run up to its await (no I/O involved: a few loop turns suffice).
    for _ in range(5):
        await asyncio.sleep(0)


@pytest.mark.django_db  # run_db recycles the thread's database connection around each read
def test_shared_read_serves_a_burst_with_one_read() -> None:
    fn = GatedRead()
    read = SharedRead(fn)

    async def scenario() -> tuple[int, list[int]]:
        first = asyncio.create_task(read())
        await fn.wait_entered()
        burst = [asyncio.create_task(read()) for _ in range(10)]
        await _settle()
        fn.release()
        first_value = await first
        await fn.wait_entered()  # the burst's own read, started when the first one ended
        fn.release()
        return first_value, list(await asyncio.gather(*burst))

    first_value, values = run(scenario())
    assert first_value == 1
    assert values == [2] * 10
    assert fn.calls == 2


@pytest.mark.django_db  # run_db recycles the thread's database connection around each read
def test_shared_reads_by_key_read_the_keys_of_a_burst_in_one_read() -> None:
    gate = GatedRead()
    asked: list[frozenset[int]] = []

    def fn(keys: frozenset[int]) -> dict[int, tuple[int, int]]:
        asked.append(keys)
        n = gate()
        return {key: (key, n) for key in keys}

    read: SharedReads[int, tuple[int, int]] = SharedReads(fn)

    async def scenario() -> tuple[tuple[int, int], list[tuple[int, int]]]:
        first = asyncio.create_task(read(1))
        await gate.wait_entered()
        burst = [asyncio.create_task(read(key)) for key in (2, 3, 3, 4)]  # they join the next read
        await _settle()
        gate.release()
        first_value = await first
        await gate.wait_entered()
        gate.release()
        return first_value, list(await asyncio.gather(*burst))

    first_value, values = run(scenario())
    assert first_value == (1, 1)
    assert values == [(2, 2), (3, 2), (3, 2), (4, 2)], "each caller gets its own key, of the read after it began"
    assert asked == [frozenset({1}), frozenset({2, 3, 4})]


@pytest.mark.django_db  # run_db recycles the thread's database connection around each read
def test_shared_read_gives_a_late_caller_a_fresh_read() -> None:
    fn = GatedRead()
    read = SharedRead(fn)

    async def scenario() -> tuple[int, int]:
        early = asyncio.create_task(read())
        await fn.wait_entered()
        late = asyncio.create_task(read())  # the running read began before this call
        await _settle()
        fn.release()
        await fn.wait_entered()
        fn.release()
        return await early, await late

    assert run(scenario()) == (1, 2)
    assert fn.calls == 2


@pytest.mark.django_db  # run_db recycles the thread's database connection around each read
def test_shared_read_survives_a_cancelled_waiter_of_the_running_read() -> None:
    fn = GatedRead()
    read = SharedRead(fn)

    async def scenario() -> tuple[list[int], bool]:
        first = asyncio.create_task(read())
        await fn.wait_entered()
        joined = [asyncio.create_task(read()) for _ in range(2)]
        await _settle()
        first.cancel()  # its read keeps running: the next one waits for it
        await _settle()
        fn.release()
        await fn.wait_entered()
        fn.release()
        values = list(await asyncio.gather(*joined))
        # The next call still gets a read of its own.
        after = asyncio.create_task(read())
        await fn.wait_entered()
        fn.release()
        values.append(await after)
        return values, first.cancelled()

    values, cancelled = run(scenario())
    assert cancelled
    assert values == [2, 2, 3]
    assert fn.calls == 3


@pytest.mark.django_db  # run_db recycles the thread's database connection around each read
def test_shared_read_survives_a_cancelled_waiter_of_the_next_read() -> None:
    fn = GatedRead()
    read = SharedRead(fn)

    async def scenario() -> list[int]:
        first = asyncio.create_task(read())
        await fn.wait_entered()
        joined = [asyncio.create_task(read()) for _ in range(3)]
        await _settle()
        joined[1].cancel()
        await _settle()
        fn.release()
        await fn.wait_entered()
        fn.release()
        return [await first, await joined[0], await joined[2]]

    assert run(scenario()) == [1, 2, 2]
    assert fn.calls == 2


@pytest.mark.django_db  # run_db recycles the thread's database connection around each read
def test_shared_read_raises_to_every_waiter_of_a_failed_read() -> None:
    fn = GatedRead(fail_on=2)
    read = SharedRead(fn)

    async def scenario() -> tuple[Any, list[Any], int]:
        first = asyncio.create_task(read())
        await fn.wait_entered()
        joined = [asyncio.create_task(read()) for _ in range(4)]
        await _settle()
        fn.release()
        await fn.wait_entered()
        fn.release()  # read 2 raises
        outcomes = await asyncio.gather(*joined, return_exceptions=True)
        later = asyncio.create_task(read())
        await fn.wait_entered()
        fn.release()
        return await first, outcomes, await later

    first_value, outcomes, later = run(scenario())
    assert first_value == 1
    assert len(outcomes) == 4
    assert all(isinstance(o, ValueError) and str(o) == "read 2 failed" for o in outcomes)
    assert later == 3  # a failed read does not stick


# --- the audit writer ---------------------------------------------------------------------
class CountingWriter(AuditWriter):
    """The real writer, also noting the size of every batch it commits."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[int] = []

    def _write(self, batch: list[_Pending]) -> None:
        self.batches.append(len(batch))
        super()._write(batch)


@pytest.fixture
def writer() -> Iterator[CountingWriter]:
    w = CountingWriter()
    yield w
    w.close_connections()  # else PostgreSQL cannot drop the test database at the end


async def _tool_call(writer: AuditWriter, i: int, work: asyncio.Event | None = None) -> bool:
    """What the server does per call: the work inside call_running, then its row; True when the
    row is committed once record() returned."""
    rid = f"req-fast-{i:06d}"
    with writer.call_running():
        if work is not None:
            await work.wait()
        else:
            await asyncio.sleep(0)
    await writer.record(
        actor=Actor.agent("bot"), action="mcp.tool.called", target=("mcp.tool", "t"), data={"n": i}, request_id=rid
    )
    return await run_db(lambda: AuditEvent.objects.filter(request_id=rid).exists())


def test_concurrent_calls_are_chained_in_fewer_batches(transactional_db: None, writer: CountingWriter) -> None:
    n = 24

    async def many() -> list[bool]:
        return list(await asyncio.wait_for(asyncio.gather(*(_tool_call(writer, i) for i in range(n))), WAIT_S))

    assert run(many()) == [True] * n
    assert AuditEvent.objects.filter(action="mcp.tool.called").count() == n
    assert verify_chain() == (n, None)
    assert sum(writer.batches) == n
    assert len(writer.batches) < n


def test_the_writer_holds_a_batch_while_other_calls_run(
    transactional_db: None, writer: CountingWriter, monkeypatch: Any
) -> None:
    # A window no test could time out on: the batch is flushed because the calls ended, not the clock.
    monkeypatch.setattr(auditlog, "GATHER_WINDOW_S", 3600.0)
    n = 6

    async def staggered() -> list[bool]:
        gates = [asyncio.Event() for _ in range(n)]
        calls = [asyncio.create_task(_tool_call(writer, i, gates[i])) for i in range(n)]
        await _settle()
        for gate in gates:  # the calls end one after another, each then records its row
            gate.set()
            await _settle()
        return list(await asyncio.wait_for(asyncio.gather(*calls), WAIT_S))

    assert run(staggered()) == [True] * n
    assert verify_chain() == (n, None)
    assert sum(writer.batches) == n
    # All rows in one batch, or the last one alone when it raced the writer's check of running calls.
    assert len(writer.batches) <= 2
    assert writer.batches[0] >= n - 1
    rows = list(AuditEvent.objects.order_by("seq"))
    assert [r.data["n"] for r in rows] == list(range(n))


def test_a_lone_call_does_not_wait_for_the_window(
    transactional_db: None, writer: CountingWriter, monkeypatch: Any
) -> None:
    # Were a lone call held for the window, it would not complete before the (loose) bound.
    monkeypatch.setattr(auditlog, "GATHER_WINDOW_S", 3600.0)

    async def lone() -> list[bool]:
        return [await asyncio.wait_for(_tool_call(writer, i), WAIT_S) for i in range(3)]

    assert run(lone()) == [True, True, True]
    assert writer.batches == [1, 1, 1]
    assert verify_chain() == (3, None)


# --- the frozen start-up heap -----------------------------------------------------------------
_PROBE = textwrap.dedent("""
    import asyncio, gc, os
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "rewind.settings")
    import uvicorn
    from rewind.asgi import application

    async def main():
        print("BEFORE", gc.get_freeze_count(), flush=True)
        server = uvicorn.Server(uvicorn.Config(application, host="127.0.0.1", port=0, lifespan="on",
                                               log_level="warning"))
        serving = asyncio.create_task(server.serve())
        for _ in range(600):
            if server.started or serving.done():
                break
            await asyncio.sleep(0.05)
        print("STARTED", server.started, flush=True)
        print("AFTER", gc.get_freeze_count(), flush=True)
        server.should_exit = True
        await serving

    asyncio.run(main())
""")


@pytest.mark.process
def test_a_worker_freezes_its_startup_heap_during_the_lifespan() -> None:
    import os

    from tests.helpers import test_database_url

    env = {**os.environ, "DATABASE_URL": test_database_url()}
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    done = subprocess.run([PYTHON, "-c", _PROBE], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)
    assert lines.get("STARTED") == "True", done.stdout + done.stderr[-3000:]
    # The interpreter may start with a few objects frozen already; the app, built by now, is not.
    assert int(lines["AFTER"]) > int(lines["BEFORE"])
