"""A person approves a held call in real Chromium: the page shows the command and its arguments as they
will be sent, the VM, the checkpoints and who asks; approving forwards exactly that call, once. The
dashboard lists what waits for a person and shows a stop in force as a banner."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from catalog.services import mutating_tool_add
from rewind.approvals.models import HeldCall
from rewind.audit import Actor
from rewind.policy.services import stop_engage
from tests.fixtures import make_user, wait_until
from tests.gateway.support import GuestShellHttp, add_http_upstream, call_at_once
from tests.markers import NEEDS_CHROMIUM

pytestmark = [pytest.mark.timeout(300), NEEDS_CHROMIUM]
APPROVE = (("rewind", "approve_heldcall"), ("rewind", "view_heldcall"), ("rewind", "view_stopswitch"))


def test_a_person_reads_the_exact_call_approves_it_and_it_runs_once(
    live_server: Any,
    page: Any,
    mcp_sites: Any,
    agent_token: Any,
    mcp_client: Any,
    worker: Any,
    guestshell_http: GuestShellHttp,
) -> None:
    make_user("hana", password="pw-hana", perms=APPROVE)
    add_http_upstream(guestshell_http)
    mutating_tool_add(
        actor=Actor.user("admin"), pattern="guestshell/exec", vm_arg="host", description="shell", decision="approve"
    )
    agent, token = agent_token
    args = {"host": "web01", "command": "echo approved-in-a-browser", "api_token": "tok-123456789"}
    held = HeldCall.objects.get(pk=call_at_once(mcp_client, token, args).meta["zerto-rewind/held"]["id"])
    review = reverse("admin:rewind_heldcall_review", args=[held.pk])
    page.goto(f"{live_server.url}/admin/login/?next=/admin/")
    page.fill("#id_username", "hana")
    page.fill("#id_password", "pw-hana")
    page.click("input[type=submit]")
    page.wait_for_url("**/admin/")
    assert f"#{held.pk}" in page.inner_text("#held-calls")  # the dashboard: waiting for a person

    page.goto(f"{live_server.url}{review}")
    assert page.inner_text("#held-tool").startswith("guestshell/exec")
    shown = page.inner_text("#held-arguments")
    assert '"command": "echo approved-in-a-browser"' in shown
    assert "tok-123456789" not in shown  # a secret-looking value is masked on the page, sent as it is
    assert page.inner_text("#held-digest") == held.arguments_digest
    assert page.inner_text("#held-vm").startswith("web01")
    for checkpoint in held.checkpoints:
        assert checkpoint["checkpoint_identifier"] in page.inner_text("#held-checkpoints")
    assert f"agent {agent.name}" in page.inner_text("#held-agent")

    page.click("#approve")
    assert "echo approved-in-a-browser" in page.inner_text("#confirm-arguments")
    page.click("#confirm")
    page.wait_for_url(f"**{review}")
    assert "Approved" in page.inner_text("ul.messagelist")

    def forwarded() -> bool:
        held.refresh_from_db()
        return held.state == "forwarded"

    wait_until(forwarded, 120, what="the approved call forwarded")
    page.reload()
    assert "ok" in page.inner_text("#held-outcome")
    assert [c["arguments"] for c in guestshell_http.calls()] == [args]

    stop_engage(actor=Actor.user("olivia"), scope="everywhere", reason="change freeze")
    page.goto(f"{live_server.url}/admin/")
    banner = page.inner_text("#dash-stops")
    assert "stopped by olivia" in banner
    assert "change freeze" in banner
