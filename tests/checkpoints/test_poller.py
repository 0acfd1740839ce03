"""Many guards at once: the wait task only inserts, one poller per site waits for them all.

Real worker and simulator throughout; the queue-position and worker-liveness reads are
plain database reads, tested with their clock passed in.
"""

from __future__ import annotations

import asyncio
import re
import signal
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from rewind.checkpoints import poll_timing
from rewind.checkpoints.selectors import guard_progress, site_listing_times_s
from rewind.checkpoints.services import guard_create
from rewind.models import AuditEvent, ChangeGuard, SitePoller, TaggedCheckpoint, WorkerHeartbeat
from rewind.sites import site_client
from rewind.workers.selectors import STALE_AFTER_S, workers_seen
from rewind.workers.services import worker_heartbeat_record
from tests.fixtures import wait_until
from tests.helpers import WorkerProcess, run, wait_guard_finished
from tests.helpers import test_database_url as database_url
from tests.mcpfixtures import make_agent_token, open_mcp_client, register_sites, run_uvicorn
from tests.simfixtures import SimHandle, run_sim


def _request(agent: Any, vm: str, timeout_s: int = 120) -> ChangeGuard:
    out = guard_create(
        agent_name=agent.name, vm=vm, action="edit", change_id=f"chg-{uuid.uuid4().hex[:12]}", timeout_s=timeout_s
    )
    assert out.guard is not None, out.refusal
    return out.guard


def _succeeded_waits(worker: WorkerProcess) -> int:
    return len(re.findall(rb"Task rewind\.checkpoints\.wait\[[^\]]+\] succeeded", worker.log_path.read_bytes()))


def test_waiting_guards_hold_no_worker_slot_and_share_the_site_poller(
    sim: Any, sites: Any, agent: Any, worker: WorkerProcess
) -> None:
    # Six guards of one VM (six change ids: six checkpoints on the same two VPGs), listed 4 s
    # after their insert. No guard queues a task of its own: the site poller's rounds insert
    # them in batches, and every checkpoint is inserted while none is listed yet.
    sim.add_fault("checkpoint_listing_delay", seconds=4)
    before = _succeeded_waits(worker)
    calls_before = sim.calls("site-a")
    guards = [_request(agent, "web01") for _ in range(6)]
    rows = TaggedCheckpoint.objects.filter(guard__in=guards)

    def all_waiting() -> bool:
        statuses = list(rows.values_list("status", flat=True))  # one query: one moment of all twelve
        assert TaggedCheckpoint.Status.LISTED not in statuses, f"listed before all were inserted: {statuses}"
        return statuses.count(TaggedCheckpoint.Status.WAITING) == 12

    wait_until(all_waiting, 60, what=lambda: f"all twelve rows waiting: {list(rows.values_list('status', flat=True))}")
    requested = AuditEvent.objects.filter(
        action="guard.checkpoint.requested", target_id__in=[str(g.pk) for g in guards]
    )
    assert requested.count() == 12, "one audited attempt per row"
    # Claimed by the batch that inserted them; the first may have been listed and ended ok since the look above.
    claimed = (ChangeGuard.Status.RUNNING, ChangeGuard.Status.OK)
    assert ChangeGuard.objects.filter(pk__in=[g.pk for g in guards], status__in=claimed).count() == 6
    for guard in guards:
        assert wait_guard_finished(guard, timeout=90).status == ChangeGuard.Status.OK
    poller = SitePoller.objects.get(site=sites["site-a"])
    assert poller.rounds >= 1
    calls = sim.calls("site-a")
    spent = {k: calls.get(k, 0) - calls_before.get(k, 0) for k in calls}
    inserts = spent.get("POST /v1/vpgs/{vpg_id}/checkpoints", 0)
    listings = spent.get("GET /v1/vpgs/{vpg_id}/checkpoints", 0)
    task_reads = spent.get("GET /v1/tasks/{task_id}", 0)
    assert inserts == 12
    # One listing per VPG per round serves all six guards: the listings are those of one guard's
    # two VPGs on the cold schedule (no history yet), not six guards' worth.
    one_guard = 2 * (poll_timing.calls_bound(10.0, None) + 1)
    assert listings <= one_guard, spent
    assert task_reads == 0, f"the task states come from one task list per round: {spent}"
    # The round that ended the last guard schedules the chain's next step after that guard's
    # commit: the chain ends then, a moment after the guard is seen finished.
    wait_until(
        lambda: SitePoller.objects.get(pk=poller.pk).lease_owner == "", 30, what="the chain ended (nothing waits)"
    )
    assert _succeeded_waits(worker) == before, "no guard needed a task of its own"


def test_a_dead_poller_chain_is_restarted_by_the_sweep(sim: Any, sites: Any, agent: Any, worker: WorkerProcess) -> None:
    from rewind.checkpoints.poller import pollers_restart_stale

    # Listed long after the sweep below: a guard already ended leaves no chain to restart.
    sim.add_fault("checkpoint_listing_delay", seconds=10)
    guard = _request(agent, "db01")
    wait_until(SitePoller.objects.filter(lease_owner__startswith="queued:").exists, 60, what="a round queued")
    # The queued round's message is lost: its token no longer matches, and its lease runs out.
    # The worker's main process (which holds the message until its countdown ends) is stopped
    # meanwhile: sent on time, the message would claim the expired lease itself, and the chain
    # would not be dead.
    # A pool child may be mid-round as the main process stops (it claimed the round just before):
    # its round renews the lease, so the message is lost again until the sweep finds the chain dead.
    assert worker.proc is not None
    worker.proc.send(signal.SIGSTOP, group=False)
    try:

        def restarted() -> int:
            SitePoller.objects.update(lease_owner="queued:lost", lease_expires_at=timezone.now() - timedelta(seconds=1))
            return pollers_restart_stale()

        wait_until(restarted, 30, what="the sweep finding the dead chain", every=0.2)
    finally:
        worker.proc.send(signal.SIGCONT, group=False)
    assert wait_guard_finished(guard, timeout=60).status == ChangeGuard.Status.OK


@pytest.mark.django_db
def test_a_queued_guard_says_how_many_are_ahead_and_whether_a_worker_is_alive(agent: Any) -> None:
    # A worker process another test of this module started may still be beating into this
    # database; within this test's transaction none has ever reported.
    WorkerHeartbeat.objects.all().delete()
    now = timezone.now()

    def guard(minutes_ago: float, status: str = ChangeGuard.Status.PENDING) -> ChangeGuard:
        g = ChangeGuard.objects.create(
            agent_name=agent.name,
            action="x",
            vm_identifier=f"vm-{uuid.uuid4().hex}",
            vm_name="web01",
            change_id=uuid.uuid4().hex,
            tag="t",
            timeout_s=300,
            status=status,
        )
        ChangeGuard.objects.filter(pk=g.pk).update(requested_at=now - timedelta(minutes=minutes_ago))
        return g

    guard(3)
    guard(2)
    guard(5, ChangeGuard.Status.OK)  # finished: not in the queue
    mine = guard(1)
    waiting = guard_progress(mine.pk, now=now).waiting_for
    assert waiting is not None
    assert "behind 2 other guard(s)" in waiting
    assert "no worker has picked it up in 60 s" in waiting
    assert "no worker has ever reported here" in waiting
    # A worker that beat a moment ago is alive; STALE_AFTER_S later it is not.
    worker_heartbeat_record(hostname="celery@a", concurrency=4, started_at=now)
    assert workers_seen(now=now).alive == 1
    assert workers_seen(now=now).slots == 4
    later = now + timedelta(seconds=STALE_AFTER_S + 1)
    seen = workers_seen(now=later)
    assert seen.alive == 0
    assert "last heartbeat was" in seen.describe(later)
    fresh = guard(0.05)
    assert "no worker has picked it up" not in (guard_progress(fresh.pk, now=now).waiting_for or "")


def test_the_worker_reports_its_heartbeat(worker: WorkerProcess) -> None:
    wait_until(WorkerHeartbeat.objects.exists, 30, what="the worker's heartbeat", every=0.1)
    assert workers_seen().alive >= 1


def test_a_stopped_worker_does_not_hold_the_agent_past_its_timeout(
    sim: Any, mcp_sites: Any, agent_token: Any, mcp_client: Any, worker: WorkerProcess
) -> None:
    _agent, token = agent_token
    assert worker.proc is not None
    progress: list[str] = []

    async def call() -> Any:
        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            progress.append(message or "")

        async with mcp_client(token) as client:
            return await client.call_tool(
                "zerto_create_tagged_checkpoint",
                {"vm": "db01", "action": "patch", "change_id": "stop-1", "timeout_s": 12},
                progress_callback=on_progress,
            )

    worker.proc.send(signal.SIGSTOP, group=False)
    try:
        started = time.monotonic()
        result = run(call())
        took = time.monotonic() - started
    finally:
        worker.proc.send(signal.SIGCONT, group=False)
    out = result.structured_content
    assert result.is_error
    assert out["finished"] is False
    assert out["status"] == "pending"
    # The deadline is the guard's own (12 s from the request) plus a short grace, whatever the
    # worker does; the bound below only says it did not wait for the worker.
    assert took < 12 + 15, took
    assert any("no worker has picked it up" in p for p in progress), progress
    assert "no worker has picked it up" in out["waiting_for"]
    # Once the worker runs again, the guard ends truthfully: too late to insert anything.
    guard = wait_guard_finished(ChangeGuard.objects.get(pk=out["id"]), timeout=60)
    assert guard.status == ChangeGuard.Status.FAILED
    assert "already timed out" in guard.error
    assert not TaggedCheckpoint.objects.filter(guard=guard, insert_started_at__isnull=False).exists()


def _guardable_filler_vms(sim: SimHandle, sites: dict[str, Any], count: int) -> list[str]:
    """Filler VMs every VPG of which can take a checkpoint (not in initial sync, no failover test)."""
    busy = {
        v.identifier
        for site in sites.values()
        for v in site_client(site).list_vpgs()
        if v.status == 0 or v.sub_status == 1 or v.failover_test_running
    }
    found: list[str] = []
    number = 1
    while len(found) < count:
        name = f"vm-{number:05d}"
        number += 1
        vpgs = sim.control("GET", f"vms/{name}")["vpgs"]
        if vpgs and all(v["identifier"] not in busy for v in vpgs):
            found.append(name)
    return found


def test_fifty_agents_guard_at_once_through_mcp(
    tmp_path: Path, transactional_db: None, celery_worker_process: Any
) -> None:
    """50 concurrent guards through MCP: 2 web workers, 1 Celery worker with 2 slots."""
    with run_sim(tmp_path / "sim", "--vms", "120") as server:
        sim = SimHandle(server)
        sim.add_fault("checkpoint_listing_delay", seconds=3)
        sites = register_sites(sim, {"Site A": "site-a", "Site B": "site-b", "Site C": "site-c"})
        vms = _guardable_filler_vms(sim, sites, 50)
        _agent, token = make_agent_token()
        celery_worker_process.stop()  # this test's worker only: one worker, two slots
        small = WorkerProcess(tmp_path / "worker.log", concurrency=2, name="fifty")
        small.start()
        try:
            with run_uvicorn(tmp_path / "web", database_url=database_url(), workers=2) as web:

                async def guard(vm: str) -> Any:
                    async with open_mcp_client(web.mcp_url, token) as client:
                        return await client.call_tool(
                            "zerto_create_tagged_checkpoint",
                            {"vm": vm, "action": "patch", "change_id": f"fifty-{vm}", "timeout_s": 240},
                        )

                async def all_at_once() -> list[Any]:
                    return await asyncio.gather(*(guard(vm) for vm in vms))

                results = run(all_at_once())
        finally:
            small.stop()
    outs = [r.structured_content for r in results]
    not_ok = [(o["vm"], o["status"], o.get("must_not_proceed")) for o in outs if not o["ok"]]
    assert not not_ok, not_ok
    assert ChangeGuard.objects.filter(status=ChangeGuard.Status.OK).count() == 50
    retried = AuditEvent.objects.filter(action="guard.checkpoint.requested", data__retry=True)
    assert not retried.exists(), "no checkpoint had to be inserted twice"


def test_the_pacing_learns_the_zvms_listing_time_not_when_the_poller_looked() -> None:
    from rewind.checkpoints.poll_round import UNSEEN_SHARE, listing_time_ms

    start = timezone.now()
    row = TaggedCheckpoint(insert_started_at=start)
    # Seen at 12 s after a look at 4 s missed it: between the two looks.
    row.last_miss_at = start + timedelta(seconds=4)
    assert listing_time_ms(row, start + timedelta(seconds=12)) == 8000
    # Seen at the first look, late (the poller was busy): the time is only bounded above, so the
    # sample is below it and the next guards look earlier, until a look misses.
    row.last_miss_at = None
    assert listing_time_ms(row, start + timedelta(seconds=10)) == int(10_000 * UNSEEN_SHARE)
    # A miss recorded before this insert (an earlier attempt) says nothing about this one.
    row.last_miss_at = start - timedelta(seconds=1)
    assert listing_time_ms(row, start + timedelta(seconds=10)) == int(10_000 * UNSEEN_SHARE)
    assert listing_time_ms(TaggedCheckpoint(insert_started_at=None), start) is None


def test_a_crowded_sites_first_look_at_the_windows_end_keeps_the_forecast() -> None:
    from rewind.checkpoints.poll_round import UNSEEN_SHARE, listing_time_ms

    start = timezone.now()
    held = poll_timing.forecast([5.3, 5.2, 5.4, 5.3])
    assert held is not None
    row = TaggedCheckpoint(insert_started_at=start)
    # Found at the first look, which a crowded round placed at the window's end (5.55 s): the
    # forecast held, and that is the sample, not a share of when the look came.
    assert listing_time_ms(row, start + timedelta(seconds=5.9), fc=held, crowded=True) == 5300
    assert listing_time_ms(row, start + timedelta(seconds=5.9)) == int(5900 * UNSEEN_SHARE)
    # Seen sooner than the forecast (the round came early): no more than when it was seen.
    assert listing_time_ms(row, start + timedelta(seconds=4.0), fc=held, crowded=True) == 4000
    # A miss before the hit brackets the time, crowded or not.
    row.last_miss_at = start + timedelta(seconds=5.5)
    assert listing_time_ms(row, start + timedelta(seconds=6.5), fc=held, crowded=True) == 6000
    # Samples like these keep a crowded site's forecast where it was, burst after burst.
    hit = listing_time_ms(
        TaggedCheckpoint(insert_started_at=start), start + timedelta(seconds=5.8), fc=held, crowded=True
    )
    assert hit is not None
    again = poll_timing.forecast([hit / 1000] * 10 + [5.3] * 10)
    assert again is not None
    assert again.expected_s == pytest.approx(5.3)


def test_a_first_look_no_sooner_than_the_forecast_keeps_it_once_the_site_is_no_longer_crowded() -> None:
    """The last rounds of a burst are not crowded, but their rows' first looks were placed at the
    window's end while it was: a hit there says the forecast held, not that the ZVM got faster."""
    from rewind.checkpoints.poll_round import UNSEEN_SHARE, listing_time_ms

    start = timezone.now()
    fc = poll_timing.forecast([5.3, 5.2, 5.4, 5.3])
    assert fc is not None
    row = TaggedCheckpoint(insert_started_at=start)
    late = [listing_time_ms(row, start + timedelta(seconds=s), fc=fc) for s in (5.3, 5.5, 5.9, 8.0)]
    assert late == [5300, 5300, 5300, 5300]
    # Two such samples in a row used to shift the forecast below the window (to 0.8 x 5.5 s).
    newest = [(ms or 0) / 1000 for ms in late[:2]]
    kept = poll_timing.forecast([*newest, 5.3, 5.2, 5.4, 5.3])
    assert kept is not None
    assert kept.expected_s == pytest.approx(5.3)
    assert kept.probe_s is None
    # Found before the expected moment (a first look at the window's start, a probe): the ZVM
    # may be faster, so a share of it, and the next guard probes.
    early = listing_time_ms(row, start + timedelta(seconds=5.1), fc=fc)
    assert early == int(5100 * UNSEEN_SHARE)
    probed = poll_timing.forecast([(early or 0) / 1000, 5.3, 5.2, 5.4, 5.3])
    assert probed is not None
    assert probed.probe_s is not None


def test_a_round_with_no_row_due_asks_nothing_and_reads_none_of_the_waiting_rows(
    sim: SimHandle, sites: Any, agent: Any, inline_tasks: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rewind.checkpoints import poller

    outcome = guard_create(agent_name=agent.name, vm="web01", action="edit")
    assert outcome.guard is not None
    inline_tasks.run_due()  # the first round: its batch inserts the checkpoint
    rows = TaggedCheckpoint.objects.filter(guard=outcome.guard)
    assert set(rows.values_list("status", flat=True)) == {TaggedCheckpoint.Status.WAITING}
    later = timezone.now() + timedelta(minutes=5)
    rows.update(next_poll_at=later)
    SitePoller.objects.update(lease_owner="", lease_expires_at=None)  # the next round may claim the site
    made: list[object] = []
    monkeypatch.setattr(poller, "SiteRound", lambda *args, **kwargs: made.append(args))
    calls_before = sim.calls("site-a")
    site_id = rows.values_list("site_id", flat=True).first()
    assert site_id is not None
    with CaptureQueriesContext(connection) as statements:
        assert poller.poller_round(site_id) == "0 inserted, 0 due, 0 listed, 0 ended, 0 requests"
    writes = [q["sql"] for q in statements if q["sql"].startswith(("UPDATE", "INSERT", "DELETE"))]
    # Nothing to insert and nothing due: it writes its claim of the site and its successor, no more.
    assert len(writes) == 2, writes
    assert all('"rewind_sitepoller"' in sql for sql in writes), writes
    assert made == [], "no row is due: the round loads none of them"
    assert set(rows.values_list("next_poll_at", flat=True)) == {later}, "the rows keep their time"
    assert sim.calls("site-a") == calls_before, "nothing asked of the ZVM"
    # Its successor is queued for when the row is due.
    assert SitePoller.objects.get(pk=site_id).next_round_at == later


def test_a_round_that_could_not_ask_the_zvm_says_why_on_its_poller_until_a_round_asks_again(
    sim: SimHandle, sites: Any, agent: Any, inline_tasks: Any
) -> None:
    # The round's error is written with its successor's queueing (one write): it must still be
    # there for an operator to read, and cleared by the next round that could ask.
    from rewind.checkpoints import poller

    guard = _request(agent, "web01")
    inline_tasks.run_due()  # the first round: its batch inserts the checkpoints
    rows = TaggedCheckpoint.objects.filter(guard=guard, site__name="Site A")
    site_id = rows.values_list("site_id", flat=True).first()
    assert site_id is not None

    def round_now() -> SitePoller:
        rows.update(next_poll_at=timezone.now() - timedelta(seconds=1))
        SitePoller.objects.update(lease_owner="", lease_expires_at=None)  # the next round may claim the site
        poller.poller_round(site_id)
        return SitePoller.objects.get(pk=site_id)

    sim.add_fault("http_error", site="site-a", status=500, path_regex=r"/v1/tasks", message="task service is down")
    failed = round_now()
    assert "task service is down" in failed.last_error
    assert failed.next_round_at is not None, "its rows ask again soon"
    sim.clear_faults()
    assert round_now().last_error == ""


def test_a_listing_asked_for_one_guard_answers_every_guard_waiting_on_that_vpg(
    sim: SimHandle, sites: Any, agent: Any, inline_tasks: Any
) -> None:
    # Two guards of one VM wait on the same two VPGs; only the first's rows are due. The round
    # lists each VPG once, and the second guard's rows count that listing as their own look:
    # they are not due again a moment later for a listing of their own.
    from rewind.checkpoints import poller

    sim.add_fault("checkpoint_listing_delay", seconds=60)
    sim.add_fault("task_delay", seconds=0)  # the insert tasks complete at once: the VPGs can be listed
    first, second = (_request(agent, "web01") for _ in range(2))
    inline_tasks.run_due()  # the first round: its batch inserts the four checkpoints
    rows = TaggedCheckpoint.objects.filter(guard__in=[first, second])
    assert list(rows.values_list("status", flat=True)) == [TaggedCheckpoint.Status.WAITING] * 4
    now = timezone.now()
    rows.filter(guard=first).update(next_poll_at=now - timedelta(seconds=1))
    not_due = now + timedelta(seconds=3)
    rows.filter(guard=second).update(next_poll_at=not_due)
    SitePoller.objects.update(lease_owner="", lease_expires_at=None)  # the next round may claim the site
    site_id = rows.values_list("site_id", flat=True).first()
    assert site_id is not None
    calls_before = sim.calls("site-a")
    poller.poller_round(site_id)
    listings = sim.calls("site-a").get("GET /v1/vpgs/{vpg_id}/checkpoints", 0) - calls_before.get(
        "GET /v1/vpgs/{vpg_id}/checkpoints", 0
    )
    assert listings == 2, "one listing per VPG"
    for row in rows.filter(guard=second):
        assert row.last_miss_at is not None
        assert row.last_miss_at >= now, "the listing looked for its tag too"
        assert row.next_poll_at != not_due, "its next look is counted from that listing"
        twin = rows.get(guard=first, vpg_identifier=row.vpg_identifier)
        assert twin.next_poll_at is not None
        assert row.next_poll_at is not None
        assert abs((row.next_poll_at - twin.next_poll_at).total_seconds()) < 0.5, "the two guards now ask together"


def test_a_look_is_timed_when_its_listing_was_asked_not_when_its_round_began(
    sim: SimHandle, sites: Any, agent: Any, inline_tasks: Any
) -> None:
    # One guard on two VPGs; the first VPG's listing answers 1.5 s late. The second was asked
    # after it: its miss (what the site's pacing learns its time to list from) and its next
    # look are counted from its own listing. Counted from the round's start, a round that
    # lists many VPGs learns times that are too early, and asks its last VPGs again at once.
    from rewind.checkpoints import poller

    sim.add_fault("checkpoint_listing_delay", seconds=60)
    sim.add_fault("task_delay", seconds=0)  # the insert tasks complete at once: the VPGs can be listed
    guard = _request(agent, "web01")
    inline_tasks.run_due()
    rows = TaggedCheckpoint.objects.filter(guard=guard).order_by("pk")
    assert rows.count() == 2
    rows.update(next_poll_at=timezone.now() - timedelta(seconds=1))
    first, second = rows
    sim.add_fault("hang", "site-a", seconds=1.5, path_regex=f"/v1/vpgs/{first.vpg_identifier}/checkpoints", count=1)
    SitePoller.objects.update(lease_owner="", lease_expires_at=None)
    assert first.site_id is not None
    began = timezone.now()
    poller.poller_round(first.site_id)
    first.refresh_from_db()
    second.refresh_from_db()
    assert first.last_miss_at is not None
    assert second.last_miss_at is not None
    assert (first.last_miss_at - began).total_seconds() < 1.0, "asked at once"
    assert (second.last_miss_at - began).total_seconds() >= 1.4, "asked after the late answer"
    assert second.next_poll_at is not None
    assert second.next_poll_at > second.last_miss_at


def test_a_burst_of_guards_probes_a_faster_zvm_with_its_oldest_vpgs_only(
    sim: SimHandle, sites: Any, agent: Any, inline_tasks: Any
) -> None:
    # The site's newest listing came early (a first look found it): the next guards probe for a
    # faster ZVM. Three guards on six VPGs of site A, inserted by one batch: the oldest guard's
    # two VPGs probe, the others sleep until the usual moment. The ZVM lists nothing yet, so a
    # probe that a slow machine's first round already reached is a miss on record, not a listing.
    site = sites["site-a"]
    _listed_history(site, agent, [1000] + [5300] * 19)
    fc = poll_timing.forecast(site_listing_times_s(site.pk))
    assert fc is not None
    assert fc.probe_s is not None
    sim.add_fault("checkpoint_listing_delay", seconds=60)
    guards = [_request(agent, vm) for vm in ("web01", "app01", "db01")]
    inline_tasks.run_due()  # the first round: its batch inserts every checkpoint
    rows = list(TaggedCheckpoint.objects.filter(guard__in=guards, site=site))
    assert len(rows) == 6
    first_look: dict[str, float] = {}
    for row in rows:
        assert row.status == TaggedCheckpoint.Status.WAITING
        assert row.insert_started_at is not None
        # The look it made already (its probe came due while the round still ran), else the one it waits for.
        look_at = row.last_miss_at or row.next_poll_at
        assert look_at is not None
        first_look[row.vpg_identifier] = (look_at - row.insert_started_at).total_seconds()
    early = {vpg for vpg, s in first_look.items() if s < fc.window_start_s / 2}
    oldest = set(TaggedCheckpoint.objects.filter(guard=guards[0]).values_list("vpg_identifier", flat=True))
    assert early == oldest, first_look
    assert all(s >= fc.window_start_s - 0.5 for vpg, s in first_look.items() if vpg not in oldest), first_look


def _listed_history(site: Any, agent: Any, newest_first_ms: list[int], *, newest_at: Any = None) -> None:
    """Listed checkpoints of earlier guards at ``site``, taking these times to list, newest first."""
    old = ChangeGuard.objects.create(
        agent_name=agent.name,
        action="edit",
        vm_identifier="old",
        vm_name="old",
        change_id=f"old-{uuid.uuid4().hex[:8]}",
        tag="t",
        timeout_s=60,
    )
    newest_at = newest_at or timezone.now() - timedelta(minutes=10)
    TaggedCheckpoint.objects.bulk_create(
        TaggedCheckpoint(
            guard=old,
            vpg_identifier=f"old-{uuid.uuid4().hex[:8]}",
            site=site,
            status=TaggedCheckpoint.Status.LISTED,
            insert_started_at=newest_at - timedelta(seconds=i),
            waited_ms=ms,
            listed_after_ms=ms,
        )
        for i, ms in enumerate(newest_first_ms)
    )


def test_a_first_look_the_newest_forecast_puts_later_waits_for_it_and_asks_nothing(
    sim: SimHandle, sites: Any, agent: Any, inline_tasks: Any
) -> None:
    # The row was given its first look by a forecast of 5.3 s. Before it looks, two guards find
    # the ZVM slower (9 s): the forecast moves, and the row waits for the new moment instead of
    # spending a request on a look that would miss.
    from rewind.checkpoints import poller

    site = sites["site-a"]
    _listed_history(site, agent, [5300] * 20, newest_at=timezone.now() - timedelta(minutes=20))
    sim.add_fault("checkpoint_listing_delay", seconds=60)
    sim.add_fault("task_delay", seconds=0)  # the insert task completes at once
    guard = _request(agent, "db01")
    inline_tasks.run_due()
    row = TaggedCheckpoint.objects.get(guard=guard)
    assert row.status == TaggedCheckpoint.Status.WAITING
    assert row.insert_started_at is not None
    assert row.next_poll_at is not None
    assert (row.next_poll_at - row.insert_started_at).total_seconds() < 5.3, "by the old forecast"
    _listed_history(site, agent, [9000, 9100])
    moved = poll_timing.forecast(site_listing_times_s(site.pk))
    assert moved is not None
    assert moved.expected_s > 8.5
    TaggedCheckpoint.objects.filter(pk=row.pk).update(next_poll_at=timezone.now() - timedelta(seconds=0.1))
    SitePoller.objects.update(lease_owner="", lease_expires_at=None)
    calls_before = sim.calls("site-a")
    assert site.pk is not None
    report = poller.poller_round(site.pk)
    assert report.startswith("0 inserted, 0 due, 0 listed"), report
    listings = sim.calls("site-a").get("GET /v1/vpgs/{vpg_id}/checkpoints", 0)
    assert listings == calls_before.get("GET /v1/vpgs/{vpg_id}/checkpoints", 0), "nothing asked"
    row.refresh_from_db()
    assert row.next_poll_at is not None
    waits = (row.next_poll_at - row.insert_started_at).total_seconds()
    assert waits == pytest.approx(moved.window_start_s, abs=0.05), "the new forecast's first look"


def test_what_a_sites_next_round_has_to_do_is_read_from_its_own_unfinished_rows(agent: Any) -> None:
    from rewind.checkpoints.insert_batch import _batch_rows
    from rewind.checkpoints.poller import _site_rows_ahead
    from rewind.checkpoints.selectors import site_inserted_rows
    from rewind.models import Site

    here, other = (Site.objects.create(name=n, base_url=f"https://{n}.example") for n in ("here", "other"))

    def row(site: Any, status: str, at: Any = None, guard_status: str = ChangeGuard.Status.RUNNING) -> None:
        n = TaggedCheckpoint.objects.count()
        guard = ChangeGuard.objects.create(
            agent_name=agent.name,
            action="edit",
            vm_identifier=f"vm-{n}",
            change_id=f"c{n}",
            tag=f"t{n}",
            timeout_s=60,
            status=guard_status,
        )
        TaggedCheckpoint.objects.create(guard=guard, site=site, vpg_identifier=f"v{n}", status=status, next_poll_at=at)

    assert _site_rows_ahead(here.pk) == (None, False, False)
    soon = timezone.now() + timedelta(seconds=5)
    row(here, TaggedCheckpoint.Status.LISTED, soon - timedelta(seconds=4))  # ended: not ahead
    row(here, TaggedCheckpoint.Status.PENDING, guard_status=ChangeGuard.Status.FAILED)  # its guard ended
    row(other, TaggedCheckpoint.Status.WAITING, soon - timedelta(seconds=3))  # another site's
    row(other, TaggedCheckpoint.Status.PENDING)
    assert _site_rows_ahead(here.pk) == (None, False, False)
    row(here, TaggedCheckpoint.Status.INSERTING)  # handed over without a time
    assert _site_rows_ahead(here.pk) == (None, True, False)
    row(here, TaggedCheckpoint.Status.WAITING, soon + timedelta(seconds=1))
    row(here, TaggedCheckpoint.Status.WAITING, soon)
    assert _site_rows_ahead(here.pk) == (soon, True, False)
    row(here, TaggedCheckpoint.Status.PENDING, guard_status=ChangeGuard.Status.PENDING)  # queued for a batch
    assert _site_rows_ahead(here.pk) == (soon, True, True)

    # What a round then reads: the inserted rows with their guards, oldest guard first, and the batch's.
    inserted = site_inserted_rows(here.pk)
    expected = TaggedCheckpoint.objects.filter(site=here, status__in=TaggedCheckpoint.INSERTED)
    assert [r.pk for r in inserted] == list(expected.order_by("guard__requested_at", "pk").values_list("pk", flat=True))
    assert [r.guard.change_id for r in inserted] == [r.guard.change_id for r in expected.order_by("pk")]
    assert inserted[1].next_poll_at == soon + timedelta(seconds=1)
    batch = _batch_rows(here, limit=10)
    assert [(r.status, r.guard.status, r.site) for r in batch] == [("pending", "pending", here)]
    assert _batch_rows(other, limit=10)[0].guard.change_id == "c3"
    assert _batch_rows(other, limit=0) == []
