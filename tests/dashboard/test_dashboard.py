"""The dashboard's numbers: what each selector counts, and that each number's link opens the admin
list of exactly those rows."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.utils import timezone

from recoveries.flr_listing import flr_listing_record
from recoveries.models import FlrSession, FlrSiteListing, ReaperSweep, RecoveryRequest
from recoveries.reaper import ReapReport, reaper_sweep_record, recoveries_reap
from rewind.audit import Actor, audit_record
from rewind.audit.verification import audit_chain_verify
from rewind.dashboard import activity, approvals, service_health
from rewind.dashboard.counts import Count
from rewind.models import ChangeGuard, Site, TaggedCheckpoint
from rewind.zvm import FlrSession as ZvmFlrSession

pytestmark = pytest.mark.django_db
NOW = timezone.now()
G = ChangeGuard.Status


def listed_rows(client: Client, count: Count) -> int:
    """How many rows the admin list behind ``count`` shows (its paginator's total)."""
    resp = client.get(count.url)
    assert resp.status_code == 200, count.url
    return int(resp.context["cl"].result_count)


def site(name: str, identifier: str, *, enabled: bool = True) -> Site:
    return Site.objects.create(
        name=name, base_url=f"https://{name.lower().replace(' ', '-')}.example", identifier=identifier, enabled=enabled
    )


def guard(
    change: str,
    status: str,
    *,
    ago: timedelta = timedelta(minutes=5),
    waited_s: float = 2.0,
    vpgs: tuple[str, ...] = (),
) -> ChangeGuard:
    g = ChangeGuard.objects.create(
        agent_name="fixer",
        action="edit",
        vm_identifier="vm-1",
        vm_name="web01",
        change_id=change,
        tag=f"tag {change}",
        status=status,
        timeout_s=60,
        tool="ssh/exec",
    )
    requested = NOW - ago
    finished = requested + timedelta(seconds=waited_s) if status in (G.OK, G.FAILED) else None
    ChangeGuard.objects.filter(pk=g.pk).update(requested_at=requested, finished_at=finished)
    for i, vpg_status in enumerate(vpgs):
        TaggedCheckpoint.objects.create(guard=g, vpg_identifier=f"vpg-{i}", vpg_name=f"vpg-{i}", status=vpg_status)
    g.refresh_from_db()
    return g


def recovery(
    vm: str = "web01",
    status: str = RecoveryRequest.Status.PENDING,
    *,
    site_identifier: str = "site-b-id",
    **fields: Any,
) -> RecoveryRequest:
    values: dict[str, Any] = {
        "agent_name": "fixer",
        "vm_identifier": f"{vm}-id",
        "vm_name": vm,
        "path": "/etc/hostname",
        "normalized_path": "/etc/hostname",
        "os": RecoveryRequest.Os.LINUX,
        "reason": "the agent broke it",
        "checkpoint_identifier": "cp-1",
        "checkpoint_source": RecoveryRequest.CheckpointSource.CHANGE_ID,
        "vpg_identifier": "vpg-1",
        "vpg_name": "vpg-web",
        "recovery_site_identifier": site_identifier,
        "status": status,
        "expires_at": NOW + timedelta(hours=1),
        **fields,
    }
    return RecoveryRequest.objects.create(**values)


def zvm_session(session_id: str, vm_identifier: str, status: str = "MountCompletedSuccessfully") -> ZvmFlrSession:
    return ZvmFlrSession(
        identifier=session_id,
        status=status,
        vm_identifier=vm_identifier,
        vpg_identifier="vpg-1",
        checkpoint_identifier="cp-1",
        mount_time=datetime(2026, 1, 5, 10, 0, tzinfo=UTC),
        site_identifier="site-b-id",
    )


def test_it_lists_pending_recoveries_oldest_first_and_links_the_count(admin_client: Client) -> None:
    newer = recovery("web01")
    older = recovery("db01")
    RecoveryRequest.objects.filter(pk=older.pk).update(created_at=NOW - timedelta(hours=2))
    overdue = recovery("app01", expires_at=NOW - timedelta(minutes=1))
    RecoveryRequest.objects.filter(pk=overdue.pk).update(created_at=NOW - timedelta(hours=3))
    recovery("done01", RecoveryRequest.Status.SUCCEEDED)

    pending = approvals.pending_recoveries(NOW)

    assert pending.count.value == 3
    assert [row.recovery.pk for row in pending.rows] == [overdue.pk, older.pk, newer.pk]
    assert [row.expired for row in pending.rows] == [True, False, False]
    assert pending.rows[1].review_url == f"/admin/recoveries/recoveryrequest/{older.pk}/review/"
    assert pending.count.url == "/admin/recoveries/recoveryrequest/?status__exact=pending"
    assert listed_rows(admin_client, pending.count) == 3


def test_it_counts_the_guards_of_the_last_day_by_outcome(admin_client: Client) -> None:
    guard("ok-1", G.OK, waited_s=1.0)
    guard("ok-2", G.OK, waited_s=3.0)
    guard("late", G.FAILED, waited_s=60.0, vpgs=(TaggedCheckpoint.Status.LISTED, TaggedCheckpoint.Status.TIMED_OUT))
    guard("broken", G.FAILED, waited_s=0.5, vpgs=(TaggedCheckpoint.Status.FAILED,))
    guard("queued", G.PENDING)
    guard("busy", G.RUNNING)
    guard("yesterday", G.FAILED, ago=timedelta(hours=25), vpgs=(TaggedCheckpoint.Status.TIMED_OUT,))

    seen = activity.guard_activity(NOW)

    assert (seen.total.value, seen.ok.value, seen.failed.value) == (6, 2, 2)
    assert (seen.timed_out.value, seen.in_progress.value) == (1, 2)
    assert seen.wait_median_s == pytest.approx(2.0)
    assert seen.wait_max_s == pytest.approx(60.0)
    assert seen.failed.tone == "bad"
    assert "status__exact=failed" in seen.failed.url
    for number in (seen.total, seen.ok, seen.failed, seen.timed_out, seen.in_progress):
        assert listed_rows(admin_client, number) == number.value, number.url
    # Newest first (these were requested at the same moment: the last recorded first).
    assert [row.guard.change_id for row in seen.recent] == ["busy", "queued", "broken", "late", "ok-2", "ok-1"]
    late = next(row for row in seen.recent if row.guard.change_id == "late")
    assert late.timed_out == ["vpg-1"]
    assert late.wait_s == pytest.approx(60.0)


def test_it_lists_the_failed_guards_with_their_timed_out_and_failed_vpgs(admin_client: Client) -> None:
    guard("late", G.FAILED, vpgs=(TaggedCheckpoint.Status.TIMED_OUT, TaggedCheckpoint.Status.TIMED_OUT))
    guard("broken", G.FAILED, ago=timedelta(minutes=10), vpgs=(TaggedCheckpoint.Status.FAILED,))
    guard("fine", G.OK)

    failed = activity.failed_guards(NOW)

    assert (failed.count.value, failed.timed_out.value) == (2, 1)
    assert [(r.guard.change_id, r.timed_out, r.failed) for r in failed.rows] == [
        ("late", ["vpg-0", "vpg-1"], []),
        ("broken", [], ["vpg-0"]),
    ]
    assert listed_rows(admin_client, failed.count) == 2
    assert listed_rows(admin_client, failed.timed_out) == 1


def test_it_counts_live_sessions_per_site_ours_and_others(admin_client: Client) -> None:
    a, b = site("Site A", "site-a-id"), site("Site B", "site-b-id")
    site("Site Off", "site-off-id", enabled=False)
    for status in (FlrSession.Status.MOUNTED, FlrSession.Status.UNMOUNT_FAILED, FlrSession.Status.ENDED):
        FlrSession.objects.create(
            site=b, session_id=f"ours-{status}", vm_identifier="vm-1", vpg_identifier="v", status=status
        )
    flr_listing_record(
        site=b,
        sessions=[
            zvm_session("ours-mounted", "vm-1"),
            zvm_session("theirs-1", "vm-2"),
            zvm_session("theirs-gone", "vm-3", status="UnmountInProgress"),
        ],
    )

    rows = {row.site.name: row for row in activity.live_sessions_per_site(NOW)}

    assert set(rows) == {"Site A", "Site B"}
    assert (rows["Site B"].ours.value, rows["Site B"].unmount_failed.value, rows["Site B"].foreign.value) == (2, 1, 1)
    assert (rows["Site A"].ours.value, rows["Site A"].foreign.value) == (0, 0)
    assert not rows["Site A"].listing_stale  # registered just now: not listed yet, not late
    assert not rows["Site B"].listing_stale
    assert listed_rows(admin_client, rows["Site B"].ours) == 2
    assert listed_rows(admin_client, rows["Site B"].unmount_failed) == 1
    assert rows["Site B"].foreign.url == f"/admin/recoveries/flrsession/live/?site={b.pk}"
    assert a.pk not in FlrSiteListing.objects.values_list("site_id", flat=True)


def test_other_operators_sessions_name_the_recoveries_they_stand_in_the_way_of() -> None:
    b = site("Site B", "site-b-id")
    c = site("Site C", "site-c-id")
    waiting = recovery("web01", site_identifier="site-b-id")
    recovery("web01", RecoveryRequest.Status.SUCCEEDED, site_identifier="site-b-id")
    recovery("web01", site_identifier="site-c-id")  # recovers at another site: not in this one's way
    flr_listing_record(site=b, sessions=[zvm_session("theirs-1", "web01-id"), zvm_session("theirs-2", "other-id")])
    reaper_sweep_record(started_at=NOW, report=ReapReport(site_errors={c.name: "site-c is unavailable since 10:00"}))

    found = approvals.foreign_sessions(NOW)

    assert found.count.value == 2
    assert found.count.tone == "attention"
    by_id = {s.session_id: s for s in found.sessions}
    assert [r.pk for r in by_id["theirs-1"].in_the_way_of] == [waiting.pk]
    assert by_id["theirs-1"].vm == "web01"  # the name a recovery told us
    assert by_id["theirs-2"].vm == "other-id"  # never named to us: Zerto's identifier
    assert by_id["theirs-2"].in_the_way_of == []
    listing = {x.site.name: x for x in found.listings}
    assert listing["Site C"].error == "site-c is unavailable since 10:00"
    assert listing["Site C"].stale
    assert listing["Site B"].listed_at is not None


def test_the_reaper_section_says_when_it_last_ran_and_what_it_last_did(admin_client: Client, settings: Any) -> None:
    assert service_health.reaper_status(NOW).overdue  # never ran
    acted = reaper_sweep_record(
        started_at=timezone.now(), report=ReapReport(unmounted=2, expired_requests=1, site_errors={"Site C": "down"})
    )
    recoveries_reap()  # no site: nothing to do, recorded all the same

    status = service_health.reaper_status(timezone.now())

    assert status.last is not None
    assert status.last.pk != acted.pk
    assert not status.last.acted
    assert not status.overdue
    assert status.last_acted == acted
    assert {a.label: a.count.value for a in status.actions} == {"unmounted": 2, "requests expired": 1}
    assert status.sweeps.value == 2
    assert listed_rows(admin_client, status.sweeps) == 2
    unmounted = next(a for a in status.actions if a.label == "unmounted")
    assert "action__exact=recoveries.session.reaped" in unmounted.count.url
    assert admin_client.get(unmounted.count.url).status_code == 200
    later = timezone.now() + timedelta(seconds=2 * settings.REWIND_REAPER_INTERVAL_S + 1)
    assert service_health.reaper_status(later).overdue


def test_old_sweeps_are_forgotten() -> None:
    old = reaper_sweep_record(started_at=timezone.now() - timedelta(days=8), report=ReapReport())
    recoveries_reap()
    assert not ReaperSweep.objects.filter(pk=old.pk).exists()


def test_the_audit_section_shows_the_last_verification_and_what_came_after(admin_client: Client) -> None:
    audit_record(actor=Actor.system("tests"), action="agent.created", target=("agent", "1"))
    before = service_health.audit_status(NOW)
    assert before.last is None
    assert before.stale
    assert before.since_verified.value == 1

    result = audit_chain_verify(actor=Actor.system("tests"))
    assert result.ok
    assert result.event is not None
    audit_record(actor=Actor.system("tests"), action="agent.changed", target=("agent", "1"))
    after = service_health.audit_status(timezone.now())

    assert after.last == result.event
    assert after.ok is True
    assert not after.stale
    assert after.last.data["events"] == 1
    assert (after.events.value, after.since_verified.value, after.verifications.value) == (3, 1, 1)
    assert listed_rows(admin_client, after.since_verified) == 1
    assert listed_rows(admin_client, after.verifications) == 1
    assert service_health.audit_status(timezone.now() + timedelta(days=2)).stale


def test_the_workers_section_counts_fresh_heartbeats() -> None:
    from rewind.workers.services import worker_heartbeat_record

    assert service_health.workers_status(NOW).alive.tone == "bad"
    worker_heartbeat_record(hostname="celery@a", concurrency=4, started_at=NOW)
    seen = service_health.workers_status(timezone.now())
    assert seen.alive.value == 1
    assert "4 slot(s)" in seen.text
    assert seen.queue == "the task queue answers"
    assert seen.beat_late  # nothing ran the beat's sweep here


def test_the_workers_section_says_when_the_beats_sweep_last_ran() -> None:
    from django_celery_results.models import TaskResult

    done = timezone.now() - timedelta(seconds=12)
    TaskResult.objects.create(task_id="t1", task_name=service_health.BEAT_PULSE_TASK, status="SUCCESS")
    TaskResult.objects.filter(task_id="t1").update(date_done=done)  # date_done is set on save
    fresh = service_health.workers_status(timezone.now())
    assert not fresh.beat_late
    assert fresh.beat.startswith("the beat's 30 s sweep ran 1")
    stopped = service_health.workers_status(timezone.now() + timedelta(minutes=10))
    assert stopped.beat_late
    assert "last ran 61" in stopped.beat
    assert "is celery beat running?" in stopped.beat


def test_the_workers_section_shows_a_task_queue_outage_and_then_the_last_one(admin_client: Any) -> None:
    from rewind.workers.services import broker_outage_ended, broker_outage_noticed

    broker_outage_noticed(broker="Redis at 127.0.0.1:6399/0", error="refused", noticed_by="w1")
    down = service_health.workers_status(timezone.now())
    assert down.queue.startswith("the task queue (Redis at 127.0.0.1:6399/0) has not answered since ")
    assert down.outages.tone == "bad"
    assert listed_rows(admin_client, down.outages) == 1
    broker_outage_ended()
    back = service_health.workers_status(timezone.now())
    assert back.queue.startswith("the task queue answers; last outage: the task queue (Redis at ")
    assert back.outages.tone == ""


def test_site_health_shows_the_circuit_and_the_token_without_asking_a_zvm() -> None:
    from rewind.sites.health import sites_health

    site("Site A", "site-a-id")
    Site.objects.filter(name="Site A").update(last_error="", identity_checked_at=NOW - timedelta(minutes=3))
    site("Site Off", "site-off-id", enabled=False)

    by_name = {h.site.name: h for h in sites_health(NOW)}

    assert by_name["Site A"].status == "available"
    assert by_name["Site A"].token.state == "none"
    assert by_name["Site A"].last_contact == NOW - timedelta(minutes=3)
    assert by_name["Site Off"].status == "disabled"


def _index(client: Client) -> str:
    resp = client.get("/admin/")
    assert resp.status_code == 200
    return resp.content.decode()


def test_the_index_groups_the_models_by_what_operators_do(admin_client: Client) -> None:
    html = _index(admin_client)
    groups = re.findall(r'<span class="section">([^<]+)</span>', html)
    assert groups == [
        "Approvals",
        "Guards and checkpoints",
        "FLR sessions",
        "The catalog",
        "Gateway",
        "Agents and sites",
        "The audit",
        "People",
    ]
    assert "FLR sessions opened here" in html
    assert "Flr sessions" not in html
    assert "task result" not in html.lower()  # Celery's result tables are no operator's business
    assert admin_client.get("/admin/django_celery_results/taskresult/").status_code == 200  # still reachable


def test_an_unknown_model_finds_its_group_by_its_part_or_its_admin() -> None:
    from django.contrib import admin

    from rewind.dashboard.grouping import group_of

    class Delivery:  # a model a part adds later, as far as grouping looks at it
        __module__ = "recoveries.notifications.models"
        _meta = type("Meta", (), {"label_lower": "recoveries.notificationdelivery"})

    class Elsewhere:
        __module__ = "reports.models"
        _meta = type("Meta", (), {"label_lower": "reports.report"})

    class PlacedAdmin(admin.ModelAdmin):
        operator_group = "audit"

    assert group_of(Delivery).name == "Approvals"  # type: ignore[arg-type]
    assert group_of(Elsewhere).name == "More"  # type: ignore[arg-type]
    assert group_of(Elsewhere, PlacedAdmin(Site, admin.site)).name == "The audit"  # type: ignore[arg-type]
    assert group_of(FlrSession).name == "FLR sessions"
    assert group_of(ReaperSweep).name == "FLR sessions"


def test_a_person_sees_only_the_sections_they_may_see(client: Client) -> None:
    approver = User.objects.create_user("alice", password="pw-alice-123", is_staff=True)
    approver.user_permissions.add(Permission.objects.get(codename="approve_recovery"))
    client.force_login(approver)
    recovery("web01")

    html = _index(client)

    assert 'id="dash-pending"' in html
    assert 'id="dash-sites"' not in html
    assert 'id="dash-audit"' not in html
    assert 'id="dash-guards"' not in html


def test_the_dashboard_renders_every_section_for_an_administrator(admin_client: Client) -> None:
    site("Site B", "site-b-id")
    recovery("web01")
    guard("late", G.FAILED, vpgs=(TaggedCheckpoint.Status.TIMED_OUT,))
    html = _index(admin_client)
    keys = (
        "pending",
        "foreign",
        "held",
        "sessions",
        "guards",
        "failed",
        "sites",
        "workers",
        "reaper",
        "audit",
        "upstreams",
    )
    for key in keys:
        assert f'id="dash-{key}"' in html, key
    assert html.index('id="dash-pending"') < html.index('id="dash-foreign"') < html.index('id="dash-sessions"')
    assert 'data-status="timed_out"' in html  # the same badge as in the lists


def test_each_audit_row_links_to_its_target(admin_client: Client) -> None:
    a = site("Site A", "site-a-id")
    audit_record(actor=Actor.user("alice"), action="site.changed", target=a)
    audit_record(actor=Actor.user("alice"), action="recoveries.session.ended_by_hand", target=("flr_session", "s-1"))

    html = admin_client.get("/admin/rewind/auditevent/").content.decode()

    assert f'href="/admin/rewind/site/{a.pk}/change/"' in html
    # Another operator's session has no page here: its link lists the events about it.
    assert 'href="/admin/rewind/auditevent/?target_type=flr_session&amp;target_id=s-1"' in html
    assert "recoveries.<wbr>session.<wbr>ended_by_hand" in html
    listed = admin_client.get("/admin/rewind/auditevent/?target_type=flr_session&target_id=s-1")
    assert listed.context["cl"].result_count == 1


def test_held_tools_wait_for_a_person_and_their_count_links_to_them(admin_client: Client) -> None:
    from rewind.gateway.services import ListedTool, upstream_create, upstream_tools_record

    up = upstream_create(actor=Actor.user("admin"), name="ops", url="http://127.0.0.1:1/mcp")
    schema = {"type": "object", "properties": {}}
    upstream_tools_record(
        upstream=up, listed=[ListedTool(n, "", "", schema, None, None, None) for n in ("run", "peek")], reserved=set()
    )
    held = approvals.held_tools_waiting(NOW)
    assert held.count.value == 2
    assert {(r.tool.name, r.state) for r in held.rows} == {("run", "new"), ("peek", "new")}
    assert listed_rows(admin_client, held.count) == 2
    page = admin_client.get("/admin/").content.decode()
    assert "Upstream tools waiting for approval" in page
    approve = admin_client.get(held.rows[0].approve_url)
    assert "(never approved)" in approve.content.decode()


def test_the_upstreams_section_names_one_whose_listing_failed_or_that_a_process_cannot_reach() -> None:
    from rewind.gateway.services import upstream_create, upstream_link_record, upstream_listing_failed

    failing = upstream_create(actor=Actor.user("admin"), name="failing", url="http://127.0.0.1:1/mcp")
    unreachable = upstream_create(actor=Actor.user("admin"), name="cut", url="http://127.0.0.1:2/mcp")
    upstream_create(actor=Actor.user("admin"), name="fine", url="http://127.0.0.1:3/mcp")
    upstream_listing_failed(upstream=failing, error="upstream failing is unavailable (connecting): ConnectError")
    upstream_link_record(upstream_id=unreachable.pk, down_since=NOW, error="upstream cut did not answer within 10 s")
    status = service_health.upstreams_status(NOW)
    assert (status.enabled, status.down.value, status.down.tone) == (3, 2, "bad")
    shown = {r.upstream.name: r for r in status.rows}
    assert set(shown) == {"failing", "cut"}
    assert "ConnectError" in shown["failing"].listing_error
    assert "did not answer within 10 s" in shown["cut"].down[0]
