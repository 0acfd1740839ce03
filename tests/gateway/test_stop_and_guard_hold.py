"""The stop switch in every process on the next call, and the guard alone holding a call for a person:
an agent → /mcp (uvicorn, 2 workers) → guard (real worker, simulator) → the guest shell as the upstream."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.management import call_command

from catalog.services import mutating_tool_add
from rewind.approvals.models import HeldCall
from rewind.approvals.services import held_call_approve
from rewind.audit import Actor
from rewind.models import AuditEvent, ChangeGuard
from rewind.policy.models import StopSwitch
from rewind.policy.services import stop_lift
from tests.fixtures import make_user
from tests.gateway.support import GuestShellHttp, add_http_upstream
from tests.helpers import call_tool, tool_text

pytestmark = pytest.mark.timeout(300)
ADMIN = Actor.user("admin")
ARGS = {"host": "web01", "command": "echo restarted"}


@pytest.fixture
def hana(transactional_db: None) -> Any:
    return make_user("hana", password="pw-hana", perms=(("rewind", "approve_heldcall"), ("rewind", "view_heldcall")))


def test_a_stop_refuses_every_guarded_change_in_every_process_at_the_next_call_until_lifted(
    mcp_sites: Any, agent_token: Any, mcp_client: Any, worker: Any, guestshell_http: GuestShellHttp
) -> None:
    add_http_upstream(guestshell_http)
    mutating_tool_add(actor=ADMIN, pattern="guestshell/exec", vm_arg="host", description="guest shell")
    _agent, token = agent_token
    call_command("stop", "--everywhere", "--reason", "incident 4711", "--by", "alice")
    # Four calls in a row: both uvicorn workers answer some, each reading the stop afresh.
    for _ in range(4):
        refused = call_tool(mcp_client, token, "guestshell__exec", ARGS)
        assert refused.is_error
        assert "STOPPED" in tool_text(refused)
        assert "by alice" in tool_text(refused)
        assert "incident 4711" in tool_text(refused)
    mutating_tool_add(actor=ADMIN, pattern="ops/exec", vm_arg="host", description="ops shell")
    guard = call_tool(
        mcp_client, token, "zerto_guard_before_mutate", {"tool": "ops/exec", "arguments": ARGS, "action": "restart"}
    )
    assert guard.is_error
    assert "STOPPED" in tool_text(guard)
    # A read-only tool still answers: a stop halts changes, not reads.
    read = call_tool(mcp_client, token, "guestshell__read_file", {"host": "web01", "path": "/etc/hostname"})
    assert not read.is_error, tool_text(read)
    assert [c["tool"] for c in guestshell_http.calls()] == ["read_file"]
    assert not ChangeGuard.objects.exists()
    stop_lift(actor=Actor.user("bob"), stop=StopSwitch.objects.get())
    again = call_tool(mcp_client, token, "guestshell__exec", ARGS)
    assert not again.is_error, tool_text(again)
    actions = set(AuditEvent.objects.values_list("action", flat=True))
    assert {"policy.stop.engaged", "policy.stop.lifted"} <= actions


def test_the_guard_alone_answers_held_and_its_status_says_when_a_person_decided(
    mcp_sites: Any, agent_token: Any, mcp_client: Any, worker: Any, hana: Any
) -> None:
    mutating_tool_add(actor=ADMIN, pattern="ops/exec", vm_arg="host", description="ops shell", decision="approve")
    _agent, token = agent_token
    answer = call_tool(
        mcp_client, token, "zerto_guard_before_mutate", {"tool": "ops/exec", "arguments": ARGS, "action": "restart"}
    )
    assert answer.is_error
    assert "HELD FOR A PERSON" in tool_text(answer)
    out = answer.structured_content
    assert (out["status"], out["ok"], out["decision"]) == ("held", False, "approve")
    held_out = out["held"]
    assert held_out["page"].endswith(f"/admin/rewind/heldcall/{held_out['id']}/review/")
    assert held_out["mode"] == "guard"
    assert len(held_out["checkpoints"]) == 2
    pending = call_tool(mcp_client, token, "zerto_held_call_status", {"id": held_out["id"]})
    assert pending.structured_content["state"] == "pending"
    held = HeldCall.objects.get(pk=held_out["id"])
    held_call_approve(held_id=held.pk, user=hana, seen_digest=held.arguments_digest)
    decided = call_tool(mcp_client, token, "zerto_held_call_status", {"id": held.pk})
    assert decided.structured_content["state"] == "approved"
    assert decided.structured_content["decided_by"] == "hana"
    assert "exactly the arguments" in decided.structured_content["next"]
    guard = call_tool(mcp_client, token, "zerto_checkpoint_status", {"id": out["id"]})
    assert guard.structured_content["ok"] is True
    assert guard.structured_content["held"]["state"] == "approved"
