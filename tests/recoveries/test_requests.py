"""Requests and approvals: bad input, who may approve, expiry, double submission, the REST API."""

from __future__ import annotations

import hashlib
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from recoveries.models import RecoveryApproval, RecoveryRequest
from recoveries.paths import GuestPathError, parse_guest_path
from recoveries.reaper import recoveries_reap
from recoveries.services import recovery_request_approve, recovery_request_create, recovery_request_deny
from rewind.agents import agent_token_issue
from rewind.audit import Actor
from rewind.lib.errors import ApplicationError, PermissionDeniedError
from rewind.models import Agent, AuditEvent
from tests.helpers import work_queued

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "path",
    [
        "",
        "   ",
        "etc/hostname",
        "./etc/hostname",
        "/etc/../etc/shadow",
        "/etc/./hostname",
        "/",
        "/etc/nginx/",
        "\\etc\\hostname",
        "/etc\\nginx.conf",
        "C:",
        "C:\\",
        "C:\\inetpub\\..\\x",
        "\\\\server\\share\\f",
        "/etc/\x00x",
        "C:\\a\\b?.txt",
        None,
    ],
)
def test_it_refuses_bad_paths(path: Any) -> None:
    with pytest.raises(GuestPathError):
        parse_guest_path(path)


@pytest.mark.parametrize(
    ("path", "normalized", "os"),
    [
        ("/etc/nginx/nginx.conf", "/etc/nginx/nginx.conf", "linux"),
        ("//etc//hostname", "/etc/hostname", "linux"),
        ("C:\\inetpub\\web.config", "C:/inetpub/web.config", "windows"),
        ("d:/data/report.csv", "D:/data/report.csv", "windows"),
    ],
)
def test_it_normalizes_good_paths(path: str, normalized: str, os: str) -> None:
    parsed = parse_guest_path(path)
    assert (parsed.normalized, parsed.os) == (normalized, os)


@pytest.mark.parametrize("path", ["etc/hostname", "/etc/../etc/shadow", "", "/etc/x\\y"])
def test_bad_input_creates_nothing(sim, sites, agent, tagged, path: str) -> None:
    tagged("web01")
    before = AuditEvent.objects.count()
    with pytest.raises(ApplicationError):
        recovery_request_create(agent=agent, vm="web01", path=path, reason="x")
    assert RecoveryRequest.objects.count() == 0
    assert AuditEvent.objects.count() == before


def test_unknown_vm_missing_reason_and_unknown_change_are_refused(sim, sites, agent, tagged) -> None:
    tagged("web01")
    cases: list[tuple[dict[str, Any], str]] = [
        ({"vm": "nosuchvm", "reason": "x"}, "nosuchvm"),
        ({"vm": "web01", "reason": "  "}, "reason"),
        ({"vm": "web01", "reason": "x", "change_id": "nope"}, "nope"),
        ({"vm": "dup01", "reason": "x"}, "dup01"),
        ({"vm": "web01", "reason": "x", "checkpoint": "999999"}, "999999"),
    ]
    for kwargs, words in cases:
        with pytest.raises(ApplicationError) as err:
            recovery_request_create(agent=agent, path="/etc/hostname", **kwargs)
        assert words in err.value.message
    assert RecoveryRequest.objects.count() == 0


def test_a_vm_without_any_tagged_checkpoint_needs_an_explicit_one(sim, sites, agent) -> None:
    with pytest.raises(ApplicationError, match="no listed tagged checkpoint"):
        recovery_request_create(agent=agent, vm="db01", path="/etc/my.cnf", reason="x")
    # A plain journal checkpoint id works, looked up at the recovery site.
    from rewind.sites import site_client

    vpg = sim.vm("db01")["vpgs"][0]
    cp = site_client(sites["site-b"]).list_checkpoints(vpg["identifier"])[0]
    recovery = recovery_request_create(agent=agent, vm="db01", path="/etc/my.cnf", reason="x", checkpoint=cp.identifier)
    assert recovery.checkpoint_source == RecoveryRequest.CheckpointSource.CHECKPOINT_ID
    assert recovery.checkpoint_timestamp == cp.timestamp


def test_the_checkpoint_is_bound_by_change_id_tag_or_latest(sim, sites, agent, tagged) -> None:
    first = tagged("app01", "chg-1")
    second = tagged("app01", "chg-2")
    by_change = recovery_request_create(
        agent=agent, vm="app01", path="/etc/app/app.conf", reason="x", change_id="chg-1"
    )
    by_tag = recovery_request_create(
        agent=agent, vm="app01", path="/etc/app/app.conf", reason="x", checkpoint=first.tag
    )
    latest = recovery_request_create(agent=agent, vm="app01", path="/etc/app/app.conf", reason="x")
    assert by_change.checkpoint_tag == by_tag.checkpoint_tag == first.tag
    assert by_tag.checkpoint_source == "tag"
    assert by_change.checkpoint_source == "change_id"
    assert latest.checkpoint_tag == second.tag
    assert latest.checkpoint_source == "latest_tagged"
    # app01 has VPGs recovering at site-b and site-c: the choice is stable (first by name).
    assert by_change.vpg_name == "vpg-app-1"
    row = first.vpgs.get(vpg_name="vpg-app-1")
    assert by_change.checkpoint_identifier == row.checkpoint_identifier


@pytest.fixture
def pending(sim, sites, agent, tagged) -> RecoveryRequest:
    tagged("web01")
    return recovery_request_create(agent=agent, vm="web01", path="/etc/hostname", reason="hostname got lost")


def test_the_owner_of_the_agent_may_not_approve(pending, people) -> None:
    with pytest.raises(PermissionDeniedError, match="you own agent"):
        recovery_request_approve(recovery_id=pending.pk, user=people.owner)
    pending.refresh_from_db()
    assert pending.status == RecoveryRequest.Status.PENDING
    assert not AuditEvent.objects.filter(action="recoveries.request.approved").exists()


def test_someone_without_the_permission_may_not_approve(pending, people) -> None:
    with pytest.raises(PermissionDeniedError):
        recovery_request_approve(recovery_id=pending.pk, user=people.outsider)
    assert RecoveryApproval.objects.count() == 0


def test_a_double_approve_acts_once(pending, people, django_capture_on_commit_callbacks) -> None:
    with django_capture_on_commit_callbacks() as queued:
        recovery_request_approve(recovery_id=pending.pk, user=people.approver)
        with pytest.raises(ApplicationError, match="approved"):
            recovery_request_approve(recovery_id=pending.pk, user=people.approver)
        with pytest.raises(ApplicationError, match="approved"):
            recovery_request_approve(recovery_id=pending.pk, user=people.second)
    assert len(work_queued(queued)) == 1
    assert RecoveryApproval.objects.count() == 1
    assert AuditEvent.objects.filter(action="recoveries.request.approved").count() == 1
    event = AuditEvent.objects.get(action="recoveries.request.approved")
    assert (event.actor_type, event.actor) == ("user", "alice")


def test_an_expired_request_cannot_be_approved(pending, people) -> None:
    RecoveryRequest.objects.filter(pk=pending.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    with pytest.raises(ApplicationError, match="expired"):
        recovery_request_approve(recovery_id=pending.pk, user=people.approver)
    pending.refresh_from_db()
    assert pending.status == RecoveryRequest.Status.EXPIRED
    assert AuditEvent.objects.filter(action="recoveries.request.expired", target_id=str(pending.pk)).exists()
    with pytest.raises(ApplicationError, match="expired"):
        recovery_request_approve(recovery_id=pending.pk, user=people.approver)


def test_the_reaper_expires_stale_pending_requests(pending) -> None:
    assert recoveries_reap().expired_requests == 0
    report = recoveries_reap(now=timezone.now() + timedelta(days=1))
    assert report.expired_requests == 1
    pending.refresh_from_db()
    assert pending.status == RecoveryRequest.Status.EXPIRED


def test_a_second_approver_must_be_someone_else(
    sim, sites, agent, tagged, people, settings, django_capture_on_commit_callbacks
) -> None:
    settings.REWIND_RECOVERY_SECOND_APPROVER = True
    tagged("web01")
    recovery = recovery_request_create(agent=agent, vm="web01", path="/etc/hostname", reason="x")
    with django_capture_on_commit_callbacks() as queued:
        assert recovery_request_approve(recovery_id=recovery.pk, user=people.approver).status == "pending"
        with pytest.raises(ApplicationError, match="second approver"):
            recovery_request_approve(recovery_id=recovery.pk, user=people.approver)
        assert recovery_request_approve(recovery_id=recovery.pk, user=people.second).status == "approved"
    assert len(work_queued(queued)) == 1
    assert list(recovery.approvals.values_list("approver_name", flat=True)) == ["alice", "bob"]


def test_deny_is_audited_and_final(pending, people) -> None:
    recovery_request_deny(recovery_id=pending.pk, user=people.owner, note="not needed")
    pending.refresh_from_db()
    assert pending.status == RecoveryRequest.Status.DENIED
    assert pending.decided_by == "olivia"
    event = AuditEvent.objects.get(action="recoveries.request.denied")
    assert event.actor == "olivia"
    with pytest.raises(ApplicationError):
        recovery_request_approve(recovery_id=pending.pk, user=people.approver)


# --- REST API -------------------------------------------------------------------------------


def test_an_agent_token_can_never_approve(pending, agent) -> None:
    token = agent_token_issue(actor=Actor.system("tests"), agent=agent).token
    client = Client(enforce_csrf_checks=True)
    url = reverse("recoveries-api:approve", args=[pending.pk])
    resp = client.post(url, HTTP_AUTHORIZATION=f"Bearer {token}")
    assert resp.status_code in (401, 403)
    pending.refresh_from_db()
    assert pending.status == RecoveryRequest.Status.PENDING
    assert RecoveryApproval.objects.count() == 0


def test_a_person_approves_and_lists_over_rest(pending, people, django_capture_on_commit_callbacks) -> None:
    client = Client()
    client.force_login(people.approver)
    listing = client.get(reverse("recoveries-api:list"), {"status": "pending"}).json()
    assert [r["id"] for r in listing["results"]] == [pending.pk]
    assert listing["results"][0]["approval_url"].endswith(f"/admin/recoveries/recoveryrequest/{pending.pk}/review/")
    with django_capture_on_commit_callbacks() as queued:
        first = client.post(reverse("recoveries-api:approve", args=[pending.pk]))
        second = client.post(reverse("recoveries-api:approve", args=[pending.pk]))
    assert first.status_code == 200
    assert first.json()["status"] == "approved"
    assert second.status_code == 409
    assert len(work_queued(queued)) == 1
    owner = Client()
    owner.force_login(people.owner)
    assert owner.get(reverse("recoveries-api:detail", args=[pending.pk])).json()["status"] == "approved"
    outsider = Client()
    outsider.force_login(people.outsider)
    assert outsider.get(reverse("recoveries-api:list")).status_code == 403


def test_the_download_url_works_for_the_requesting_agent_only(pending, people, agent, tmp_path) -> None:
    data = b"\x00\x01 binary \xff" * 1000
    stored = tmp_path / "hostname"
    stored.write_bytes(data)
    RecoveryRequest.objects.filter(pk=pending.pk).update(
        status="succeeded", ok=True, stored_path=str(stored), size=len(data), sha256=hashlib.sha256(data).hexdigest()
    )
    mine = agent_token_issue(actor=Actor.system("tests"), agent=agent).token
    other_agent = Agent.objects.create(name="other", owner=people.second)
    theirs = agent_token_issue(actor=Actor.system("tests"), agent=other_agent).token
    url = reverse("recoveries-api:download", args=[pending.pk])
    client = Client()
    ok = client.get(url, HTTP_AUTHORIZATION=f"Bearer {mine}")
    assert ok.status_code == 200
    assert ok.getvalue() == data  # the streamed body, joined
    assert ok["X-Content-SHA256"] == hashlib.sha256(data).hexdigest()
    assert client.get(url, HTTP_AUTHORIZATION=f"Bearer {theirs}").status_code == 404
    assert client.get(url, HTTP_AUTHORIZATION="Bearer rwd_wrong").status_code == 401
    assert client.get(url).status_code in (401, 403)
    client.force_login(people.approver)
    assert client.get(url).status_code == 200


# --- admin ----------------------------------------------------------------------------------


def test_the_admin_review_page_shows_the_request_and_approves_behind_a_confirmation(
    pending, people, django_capture_on_commit_callbacks
) -> None:
    client = Client()
    client.force_login(people.approver)
    review = reverse("admin:recoveries_recoveryrequest_review", args=[pending.pk])
    page = client.get(review).content.decode()
    for expected in (
        "web01",
        "/etc/hostname",
        pending.vpg_name,
        "Site B",
        pending.checkpoint_tag,
        "fixer",
        "hostname got lost",
        "Approve",
        "Deny",
    ):
        assert expected in page
    confirm = reverse("admin:recoveries_recoveryrequest_decide", args=[pending.pk, "approve"])
    assert "Yes, approve" in client.get(confirm).content.decode()
    pending.refresh_from_db()
    assert pending.status == RecoveryRequest.Status.PENDING  # the confirmation page itself changes nothing
    with django_capture_on_commit_callbacks() as queued:
        client.post(confirm)
        client.post(confirm)
    assert len(work_queued(queued)) == 1
    pending.refresh_from_db()
    assert pending.status == RecoveryRequest.Status.APPROVED
    assert pending.decided_by == "alice"


def test_a_person_ends_another_operators_session_from_the_live_list_behind_a_confirmation(sim, sites, people) -> None:
    from django.contrib.auth.models import Permission

    from rewind.audit.actions import RecoveryAction

    people.approver.user_permissions.add(Permission.objects.get(codename="end_flr_session"))
    foreign = sim.open_foreign_session("site-b", "db01", "vpg-db")
    client = Client()
    client.force_login(people.approver)
    live = client.get(reverse("admin:recoveries_flrsession_live")).content.decode()
    assert foreign in live
    assert "someone else" in live
    end = reverse("admin:recoveries_flrsession_end", args=[sites["site-b"].pk, foreign])
    assert "did not open this session" in client.get(end).content.decode()
    assert any(s["session_id"] == foreign and s["status"] != "UnmountInProgress" for s in sim.sessions("site-b"))
    done = client.post(end, follow=True).content.decode()
    assert "unmount sent" in done
    assert all(s["session_id"] != foreign or s["status"] == "UnmountInProgress" for s in sim.sessions("site-b"))
    event = AuditEvent.objects.get(action=RecoveryAction.SESSION_ENDED_BY_HAND)
    assert event.actor == "alice"
    assert event.data["session_id"] == foreign


def test_the_owner_sees_no_approve_button_and_an_outsider_no_page(pending, people) -> None:
    review = reverse("admin:recoveries_recoveryrequest_review", args=[pending.pk])
    owner = Client()
    owner.force_login(people.owner)
    page = owner.get(review).content.decode()
    assert 'id="approve"' not in page
    assert "someone else must approve" in page
    owner.post(reverse("admin:recoveries_recoveryrequest_decide", args=[pending.pk, "approve"]))
    pending.refresh_from_db()
    assert pending.status == RecoveryRequest.Status.PENDING
    outsider = Client()
    outsider.force_login(people.outsider)
    assert outsider.get(review).status_code == 403


def test_the_admin_list_opens_on_the_pending_queue(pending, people) -> None:
    from django.contrib.auth.models import Permission, User

    only_approve = User.objects.create_user("carol", is_staff=True)
    only_approve.user_permissions.add(Permission.objects.get(codename="approve_recovery"))
    client = Client()
    client.force_login(only_approve)
    url = reverse("admin:recoveries_recoveryrequest_changelist")
    first = client.get(url)
    assert first.status_code == 302
    assert first["Location"].endswith("?status__exact=pending")
    page = client.get(first["Location"]).content.decode()
    assert "Review and decide" in page
    assert "/etc/hostname" in page


def test_results_come_inline_as_text_or_base64_and_by_url_when_large(pending, tmp_path, settings) -> None:
    from recoveries.presenters import result_dict

    def finish(data: bytes) -> RecoveryRequest:
        stored = tmp_path / f"f{len(data)}"
        stored.write_bytes(data)
        RecoveryRequest.objects.filter(pk=pending.pk).update(
            status="succeeded",
            ok=True,
            stored_path=str(stored),
            size=len(data),
            sha256=hashlib.sha256(data).hexdigest(),
            unmount_ok=False,
            unmount_session_id="s-1",
            unmount_warning="the unmount failed: boom",
        )
        return RecoveryRequest.objects.get(pk=pending.pk)

    text = result_dict(finish("héllo\n".encode()))
    assert text is not None
    assert (text["content"], text["encoding"], text["ok"]) == ("héllo\n", "utf-8", True)
    assert text["unmount"] == {"ok": False, "session_id": "s-1", "warning": "the unmount failed: boom"}
    binary = result_dict(finish(b"\xff\xfe\x00"))
    assert binary is not None
    assert (binary["content"], binary["encoding"]) == ("//4A", "base64")
    settings.REWIND_INLINE_MAX_BYTES = 4
    large = result_dict(finish(b"12345"))
    assert large is not None
    assert "content" not in large
    assert large["url"].endswith(f"/api/recoveries/{pending.pk}/download/")
