"""A held call answered by URL elicitation (2026-07-28): the client is asked to open the held call's
review page, and its retry continues that same held call: accepted, it waits for the person and the
upstream sees exactly the approved call, once; declined, it answers at once; a forged state, nothing.
Clients without URL elicitation, and the handshake era, wait with progress as before."""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.auth.middleware.auth_context import auth_context_var
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, ElicitRequestURLParams, ElicitResult

from catalog.models import MutatingTool
from catalog.services import mutating_tool_add
from rewind.approvals.jcs import digest
from rewind.approvals.models import HeldCall
from rewind.approvals.services import held_call_approve
from rewind.audit import Actor
from rewind.audit.models import AuditEvent
from rewind.gateway.forward import held_to_continue
from rewind.gateway.models import GatewayCall
from tests.fixtures import make_user, wait_until
from tests.gateway.support import GuestShellHttp, add_http_upstream
from tests.helpers import run, tool_text
from tests.mcpfixtures import bearer_http_client, make_agent_token

pytestmark = pytest.mark.timeout(300)
TOOL = "guestshell__exec"
APPROVE = (("rewind", "approve_heldcall"), ("rewind", "view_heldcall"))


@pytest.fixture
def hana(transactional_db: None) -> Any:
    return make_user("hana", password="pw-hana", perms=APPROVE)


def approve_entry() -> MutatingTool:
    return mutating_tool_add(
        actor=Actor.user("admin"),
        pattern="guestshell/exec",
        vm_arg="host",
        description="guest shell",
        decision="approve",
    )


def held_call_round(
    url: str,
    token: str,
    args: dict[str, Any],
    action: Literal["accept", "decline", "cancel"],
    asked: list[Any],
    *,
    mode: str = "auto",
    elicit: bool = True,
    said: list[Any] | None = None,
) -> Any:
    """One call through the official Python client, which answers every elicitation with ``action``
    (``elicit=False``: a client that declares no elicitation at all)."""

    async def on_elicit(context: Any, params: Any) -> ElicitResult:
        asked.append(params)
        return ElicitResult(action=action)

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        if said is not None:  # asking for progress keeps the waiting call's stream alive either way
            said.append(message)

    async def go() -> Any:
        async with bearer_http_client(token) as http:
            transport = streamable_http_client(url, http_client=http)
            callback = on_elicit if elicit else None
            async with Client(transport, mode=mode, elicitation_callback=callback) as client:
                return await client.call_tool(TOOL, args, progress_callback=on_progress)

    return run(go())


@contextlib.contextmanager
def acting_as(agent: Any) -> Iterator[None]:
    """In-process, the identity the SDK binds for a verified token of ``agent``."""
    token = AccessToken(token="t", client_id=agent.name, subject=str(agent.pk), scopes=["rewind:read"])
    bound = auth_context_var.set(AuthenticatedUser(token))
    try:
        yield
    finally:
        auth_context_var.reset(bound)


def pending_held() -> HeldCall:
    return wait_until(lambda: HeldCall.objects.filter(state="pending").first(), 120, what="the held call")


def tool_outcomes(agent_name: str) -> list[str]:
    rows = AuditEvent.objects.filter(action="mcp.tool.called", actor=agent_name).order_by("seq")
    return [row.data["outcome"] for row in rows if row.data["tool"] == TOOL]


def test_accepted_the_retry_continues_the_same_held_call_and_the_approved_call_runs_once(
    mcp_server: Any, mcp_sites: Any, agent_token: Any, worker: Any, guestshell_http: GuestShellHttp, hana: Any
) -> None:
    add_http_upstream(guestshell_http)
    approve_entry()
    agent, token = agent_token
    args = {"host": "web01", "command": "echo approved-by-elicitation"}
    asked: list[Any] = []
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(held_call_round, mcp_server.mcp_url, token, args, "accept", asked)
        held = pending_held()
        wait_until(lambda: asked or None, 120, what="the elicitation")
        assert guestshell_http.calls() == []
        held_call_approve(held_id=held.pk, user=hana, seen_digest=held.arguments_digest)
        result = waiting.result(timeout=180)
    assert not result.is_error, tool_text(result)
    assert "approved-by-elicitation" in tool_text(result)
    assert result.meta["zerto-rewind/held"]["id"] == held.pk
    [params] = asked
    assert isinstance(params, ElicitRequestURLParams)
    assert params.url.endswith(f"/admin/rewind/heldcall/{held.pk}/review/")
    assert "guestshell/exec" in params.message
    assert "web01" in params.message
    # Exactly the approved arguments, once; the retry made no call, guard or hold of its own.
    assert [(c["tool"], c["arguments"]) for c in guestshell_http.calls()] == [("exec", args)]
    held.refresh_from_db()
    assert (held.state, held.outcome, held.arguments_digest) == ("forwarded", "ok", digest(args))
    assert HeldCall.objects.count() == 1
    [call] = GatewayCall.objects.all()
    assert (call.call_id, call.decision, call.outcome) == (held.call_id, "released", "ok")
    assert tool_outcomes(agent.name) == ["input_required", "ok"]


def test_declined_the_call_answers_at_once_with_its_id_and_page_and_nothing_runs(
    mcp_server: Any, mcp_sites: Any, agent_token: Any, worker: Any, guestshell_http: GuestShellHttp
) -> None:
    add_http_upstream(guestshell_http)
    approve_entry()
    agent, token = agent_token
    asked: list[Any] = []
    args = {"host": "web01", "command": "echo no"}
    result = held_call_round(mcp_server.mcp_url, token, args, "decline", asked)
    held = HeldCall.objects.get()
    assert result.is_error  # nothing ran
    text = tool_text(result)
    assert "HELD FOR A PERSON" in text
    assert f"zerto_held_call_status with id {held.pk}" in text
    assert f"/admin/rewind/heldcall/{held.pk}/review/" in text
    assert result.meta["zerto-rewind/held"]["id"] == held.pk
    assert len(asked) == 1
    assert held.state == "pending"  # still waits for a person in the browser
    assert guestshell_http.calls() == []
    assert GatewayCall.objects.count() == 1
    assert tool_outcomes(agent.name) == ["input_required", "error"]
    # The gateway's own lock behind the SDK's seal: only this agent, only these arguments, continue it.
    state = f"zerto-rewind/held-call:{held.pk}:{held.arguments_digest}"
    other, _other_token = make_agent_token("other-agent")
    with acting_as(other):
        assert "is not a call of guestshell__exec by this agent" in str(held_to_continue(TOOL, args, state))
    with acting_as(agent):
        changed = {**args, "command": "echo yes"}
        assert "not the ones held call" in str(held_to_continue(TOOL, changed, state))
        forged = f"zerto-rewind/held-call:{held.pk}:{digest(changed)}"  # state and arguments agree; the held call not
        assert "not the ones held call" in str(held_to_continue(TOOL, changed, forged))
        continued = held_to_continue(TOOL, args, state)
        assert not isinstance(continued, str), continued
        assert continued.held.pk == held.pk


def test_a_garbled_request_state_is_refused_and_nothing_is_held_or_forwarded(
    mcp_client: Any, mcp_sites: Any, agent_token: Any, guestshell_http: GuestShellHttp
) -> None:
    add_http_upstream(guestshell_http)
    approve_entry()
    _agent, token = agent_token
    args = {"host": "web01", "command": "echo forged"}

    async def go() -> MCPError | None:
        async with mcp_client(token) as client:
            try:
                await client.session.call_tool(
                    TOOL, args, request_state=f"zerto-rewind/held-call:1:{digest(args)}", allow_input_required=True
                )
            except MCPError as exc:
                return exc
        return None

    refused = run(go())
    assert refused is not None
    assert refused.error.code == INVALID_PARAMS
    assert guestshell_http.calls() == []
    assert not HeldCall.objects.exists()
    assert not GatewayCall.objects.exists()


@pytest.mark.parametrize("state", ["", "held-call:1:abc", "zerto-rewind/held-call:x:" + "0" * 64, "other-server"])
def test_a_request_state_this_gateway_did_not_issue_names_no_held_call(state: str) -> None:
    refusal = held_to_continue(TOOL, {}, state)
    assert refusal == "this requestState was not issued by this gateway for a held call"


@pytest.mark.parametrize(("mode", "elicit"), [("legacy", True), ("auto", False)])
def test_without_url_elicitation_in_the_2026_era_the_call_waits_with_progress_as_before(
    mode: str,
    elicit: bool,
    mcp_server: Any,
    mcp_sites: Any,
    agent_token: Any,
    worker: Any,
    guestshell_http: GuestShellHttp,
    hana: Any,
) -> None:
    add_http_upstream(guestshell_http)
    approve_entry()
    agent, token = agent_token
    args = {"host": "web01", "command": f"echo waited-{mode}"}
    asked: list[Any] = []
    progress: list[Any] = []
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(
            held_call_round,
            mcp_server.mcp_url,
            token,
            args,
            "accept",
            asked,
            mode=mode,
            elicit=elicit,
            said=progress,
        )
        held = pending_held()
        held_call_approve(held_id=held.pk, user=hana, seen_digest=held.arguments_digest)
        result = waiting.result(timeout=180)
    assert not result.is_error, tool_text(result)
    assert asked == []  # the handshake era has no input_required: the call waits as it always did
    assert any(m and f"/{held.pk}/review/" in m for m in progress)
    assert [c["arguments"] for c in guestshell_http.calls()] == [args]
    assert tool_outcomes(agent.name) == ["ok"]


def test_the_typescript_client_accepts_the_page_and_its_retry_gets_the_approved_answer(
    node_mcp_client: Any,
    mcp_server: Any,
    mcp_sites: Any,
    agent_token: Any,
    worker: Any,
    guestshell_http: GuestShellHttp,
    hana: Any,
) -> None:
    add_http_upstream(guestshell_http)
    approve_entry()
    agent, token = agent_token
    args = {"host": "web01", "command": "echo approved-for-typescript"}
    approved: list[HeldCall] = []

    def approve_when_held() -> None:
        held = pending_held()
        held_call_approve(held_id=held.pk, user=hana, seen_digest=held.arguments_digest)
        approved.append(held)

    person = threading.Thread(target=approve_when_held)
    person.start()
    try:
        done = subprocess.run(
            ["node", "client_elicit.mjs", mcp_server.mcp_url, token, "accept", TOOL, json.dumps(args)],
            cwd=node_mcp_client,
            capture_output=True,
            text=True,
            timeout=280,
        )
    finally:
        person.join(timeout=130)
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert "error" not in out, (out, done.stderr[-2000:])
    [held] = approved
    assert out["protocolVersion"] == "2026-07-28"
    [asked] = out["elicitations"]
    assert asked["mode"] == "url"
    assert asked["url"].endswith(f"/admin/rewind/heldcall/{held.pk}/review/")
    assert out["isError"] is False, out
    assert "approved-for-typescript" in out["text"]
    assert out["meta"]["zerto-rewind/held"]["id"] == held.pk
    assert [(c["tool"], c["arguments"]) for c in guestshell_http.calls()] == [("exec", args)]
    assert GatewayCall.objects.count() == 1
    assert tool_outcomes(agent.name) == ["input_required", "ok"]
