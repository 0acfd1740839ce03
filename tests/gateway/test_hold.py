"""Calls held for a person through the gateway, end to end: an agent → /mcp (uvicorn, 2 workers) → the
catalog says ``approve`` → guard (real worker, simulator) → held → a person approves, denies, or
something changes → the guest shell as the real upstream sees exactly the approved call, once, or nothing."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from django.db import transaction

from catalog.models import MutatingTool
from catalog.services import mutating_tool_add, mutating_tool_update
from rewind.approvals.jcs import digest
from rewind.approvals.models import HeldCall
from rewind.approvals.services import held_call_approve, held_call_deny, held_calls_sweep
from rewind.audit import Actor
from rewind.gateway.models import GatewayCall
from rewind.gateway.release import held_call_release_now
from rewind.lib.errors import ApplicationError, PermissionDeniedError
from tests.fixtures import make_user, wait_until
from tests.gateway.support import GuestShellHttp, add_http_upstream, call_at_once
from tests.helpers import call_tool, run, tool_text

pytestmark = pytest.mark.timeout(300)
NGINX = "/etc/nginx/nginx.conf"
ADMIN = Actor.user("admin")
APPROVE = (("rewind", "approve_heldcall"), ("rewind", "view_heldcall"))


@pytest.fixture
def hana(transactional_db: None) -> Any:
    return make_user("hana", password="pw-hana", perms=APPROVE)


def approve_entry() -> MutatingTool:
    return mutating_tool_add(
        actor=ADMIN, pattern="guestshell/exec", vm_arg="host", description="guest shell", decision="approve"
    )


def status(mcp_client: Any, token: str, held_id: int) -> Any:
    async def go() -> Any:
        async with mcp_client(token) as client:
            return await client.call_tool("zerto_held_call_status", {"id": held_id})

    return run(go())


def held_in(state: str, held: HeldCall, timeout: float = 120) -> HeldCall:
    def reached() -> HeldCall | None:
        held.refresh_from_db()
        return held if held.state == state else None

    return wait_until(reached, timeout, what=f"held call #{held.pk} {state}")


def test_approved_the_exact_call_runs_once_while_the_agent_waits(
    sim: Any, mcp_sites: Any, agent_token: Any, mcp_client: Any, worker: Any, guestshell_http: GuestShellHttp, hana: Any
) -> None:
    add_http_upstream(guestshell_http)
    approve_entry()
    agent, token = agent_token
    args = {"host": "web01", "command": f"echo approved > {NGINX}"}
    progress: list[Any] = []
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(call_tool, mcp_client, token, "guestshell__exec", args, progress)
        held = wait_until(lambda: HeldCall.objects.filter(state="pending").first(), 120, what="the held call")
        # Held after its checkpoints, bound to exactly these arguments; the upstream has seen nothing.
        assert guestshell_http.calls() == []
        assert (held.agent_name, held.tool, held.vm, held.mode) == (agent.name, "guestshell/exec", "web01", "gateway")
        assert held.arguments_digest == digest(args)
        assert len(held.checkpoints) == 2
        assert all(c["checkpoint_identifier"] for c in held.checkpoints)
        assert held.guard is not None
        assert held.guard.decision == "approve"
        done = held_call_approve(held_id=held.pk, user=hana, seen_digest=held.arguments_digest)
        assert done.decided_by == "hana"  # approved; the waiting call may have claimed its release already
        result = waiting.result(timeout=180)
    assert not result.is_error, tool_text(result)
    assert result.meta["zerto-rewind/held"]["id"] == held.pk
    seen = guestshell_http.calls()
    assert [(c["tool"], c["arguments"]) for c in seen] == [("exec", args)]
    assert sim.read_file("web01", NGINX) == b"approved\n"
    held.refresh_from_db()
    assert (held.state, held.outcome, held.decided_by) == ("forwarded", "ok", "hana")
    call = GatewayCall.objects.get(call_id=held.call_id)
    assert (call.decision, call.outcome) == ("released", "ok")
    assert call.forwarded_at is not None
    assert held.decided_at is not None
    assert call.forwarded_at >= held.decided_at
    assert any(
        message and "waiting for a person: " in message and f"/{held.pk}/review/" in message for *_, message in progress
    )
    # A double click, and the release task run again: nothing more goes out.
    with pytest.raises(ApplicationError):
        held_call_approve(held_id=held.pk, user=hana, seen_digest=held.arguments_digest)
    assert held_call_release_now(held.pk) == "forwarded"
    assert len(guestshell_http.calls()) == 1


def test_not_waiting_the_call_answers_with_its_page_and_the_status_gives_the_answer_once_released(
    mcp_sites: Any, agent_token: Any, mcp_client: Any, worker: Any, guestshell_http: GuestShellHttp, hana: Any
) -> None:
    add_http_upstream(guestshell_http)
    approve_entry()
    _agent, token = agent_token
    args = {"host": "web01", "command": "echo released-by-the-worker"}
    answer = call_at_once(mcp_client, token, args)
    assert answer.is_error  # nothing ran yet
    assert "HELD FOR A PERSON" in tool_text(answer)
    assert "the catalog entry guestshell/exec says approve" in tool_text(answer)
    held = HeldCall.objects.get(pk=answer.meta["zerto-rewind/held"]["id"])
    assert answer.meta["zerto-rewind/held"]["page"].endswith(f"/admin/rewind/heldcall/{held.pk}/review/")
    pending = status(mcp_client, token, held.pk)
    assert pending.structured_content["state"] == "pending"
    assert guestshell_http.calls() == []
    held_call_approve(held_id=held.pk, user=hana, seen_digest=held.arguments_digest)
    held_in("forwarded", held)  # released by the task the approval queued: nobody was waiting
    final = status(mcp_client, token, held.pk)
    assert final.structured_content["state"] == "forwarded"
    assert "released-by-the-worker" in tool_text(final)
    assert [c["arguments"] for c in guestshell_http.calls()] == [args]


def test_other_arguments_are_a_new_request_and_a_replayed_approval_forwards_nothing(
    mcp_sites: Any, agent_token: Any, mcp_client: Any, worker: Any, guestshell_http: GuestShellHttp, hana: Any
) -> None:
    add_http_upstream(guestshell_http)
    approve_entry()
    _agent, token = agent_token
    approved_args = {"host": "web01", "command": "echo one"}
    first = HeldCall.objects.get(
        pk=call_at_once(mcp_client, token, approved_args, "chg-7").meta["zerto-rewind/held"]["id"]
    )
    held_call_approve(held_id=first.pk, user=hana, seen_digest=first.arguments_digest)
    held_in("forwarded", first)
    # One argument changed, same change id: a new held call, pending; the approval does not cover it.
    changed = call_at_once(mcp_client, token, {"host": "web01", "command": "echo two"}, "chg-7")
    second = HeldCall.objects.get(pk=changed.meta["zerto-rewind/held"]["id"])
    assert second.pk != first.pk
    assert second.state == "pending"
    assert second.guard_id == first.guard_id
    assert second.arguments_digest != first.arguments_digest
    # The approved call again: refused, not forwarded a second time.
    replay = call_at_once(mcp_client, token, approved_args, "chg-7")
    assert replay.is_error
    assert "not forwarded again" in tool_text(replay)
    assert [c["arguments"] for c in guestshell_http.calls()] == [approved_args]


def test_a_policy_that_denies_by_the_release_refuses_it(
    mcp_sites: Any, agent_token: Any, mcp_client: Any, worker: Any, guestshell_http: GuestShellHttp, hana: Any
) -> None:
    add_http_upstream(guestshell_http)
    entry = approve_entry()
    _agent, token = agent_token
    held = HeldCall.objects.get(
        pk=call_at_once(mcp_client, token, {"host": "web01", "command": "rm -rf /srv"}).meta["zerto-rewind/held"]["id"]
    )
    with transaction.atomic():  # approved, and the entry set to deny, before any release can start
        held_call_approve(held_id=held.pk, user=hana, seen_digest=held.arguments_digest)
        mutating_tool_update(actor=ADMIN, tool=entry, decision="deny")
    held_in("refused", held)
    assert "the policy changed" in held.refusal
    assert "deny" in held.refusal
    assert held.released_policy_version is not None
    assert held.released_policy_version > held.policy_version
    assert guestshell_http.calls() == []
    assert GatewayCall.objects.get(call_id=held.call_id).decision == "refused"


def test_a_checkpoint_gone_before_the_release_refuses_it(
    sim: Any, mcp_sites: Any, agent_token: Any, mcp_client: Any, worker: Any, guestshell_http: GuestShellHttp, hana: Any
) -> None:
    add_http_upstream(guestshell_http)
    approve_entry()
    _agent, token = agent_token
    held = HeldCall.objects.get(
        pk=call_at_once(mcp_client, token, {"host": "web01", "command": "echo x"}).meta["zerto-rewind/held"]["id"]
    )
    gone = held.checkpoints[0]
    sim.resync(gone["vpg_identifier"])  # a resync wipes every checkpoint of the VPG
    held_call_approve(held_id=held.pk, user=hana, seen_digest=held.arguments_digest)
    held_in("refused", held)
    assert f"checkpoint {gone['checkpoint_identifier']}" in held.refusal
    assert "no longer listed" in held.refusal
    assert guestshell_http.calls() == []


def test_denied_and_expired_calls_forward_nothing(
    mcp_sites: Any, agent_token: Any, mcp_client: Any, worker: Any, guestshell_http: GuestShellHttp, hana: Any
) -> None:
    add_http_upstream(guestshell_http)
    approve_entry()
    _agent, token = agent_token
    denied = HeldCall.objects.get(
        pk=call_at_once(mcp_client, token, {"host": "web01", "command": "echo d"}).meta["zerto-rewind/held"]["id"]
    )
    held_call_deny(held_id=denied.pk, user=hana, note="not today")
    answer = status(mcp_client, token, denied.pk)
    assert answer.is_error
    assert "denied by hana: not today" in tool_text(answer)
    late = HeldCall.objects.get(
        pk=call_at_once(mcp_client, token, {"host": "web01", "command": "echo e"}).meta["zerto-rewind/held"]["id"]
    )
    HeldCall.objects.filter(pk=late.pk).update(expires_at=late.created_at)  # its hour has passed
    assert held_calls_sweep().expired == 1
    with pytest.raises(ApplicationError):
        held_call_approve(held_id=late.pk, user=hana, seen_digest=late.arguments_digest)
    assert status(mcp_client, token, late.pk).structured_content["state"] == "expired"
    assert guestshell_http.calls() == []


def test_the_agents_owner_and_the_agent_itself_cannot_approve(
    mcp_sites: Any, agent_token: Any, mcp_client: Any, worker: Any, guestshell_http: GuestShellHttp, hana: Any
) -> None:
    add_http_upstream(guestshell_http)
    approve_entry()
    agent, token = agent_token
    held = HeldCall.objects.get(
        pk=call_at_once(mcp_client, token, {"host": "web01", "command": "echo o"}).meta["zerto-rewind/held"]["id"]
    )
    with pytest.raises(PermissionDeniedError, match="you own agent"):
        held_call_approve(held_id=held.pk, user=agent.owner, seen_digest=held.arguments_digest)

    async def tools() -> set[str]:
        async with mcp_client(token) as client:
            return {t.name for t in (await client.list_tools()).tools}

    # No tool of the agent's approves, lifts a stop or changes the policy.
    assert not {n for n in run(tools()) if any(w in n for w in ("approve", "lift", "stop", "policy"))}
    held.refresh_from_db()
    assert held.state == "pending"
    assert not held.approvals.exists()
