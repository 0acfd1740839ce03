"""A person adds the guest shell as an upstream in the admin in real Chromium, tests the connection,
and its tools appear on /mcp under their exposed names."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db.models import F

from catalog.models import ToolSighting
from rewind.gateway.models import Upstream, UpstreamTool
from rewind.models import AuditEvent
from tests.gateway.support import GuestShellHttp
from tests.helpers import post
from tests.markers import NEEDS_CHROMIUM
from tests.mcpfixtures import make_agent_token

pytestmark = [
    pytest.mark.timeout(300),
    NEEDS_CHROMIUM,
]


def test_a_person_adds_an_upstream_tests_it_and_agents_see_its_tools(
    live_server: Any, mcp_server: Any, page: Any, guestshell_http: GuestShellHttp
) -> None:
    User.objects.create_superuser("root", "root@example.com", "pw-root-12345")
    page.goto(f"{live_server.url}/admin/login/?next=/admin/rewind/upstream/add/")
    page.fill("#id_username", "root")
    page.fill("#id_password", "pw-root-12345")
    page.click("input[type=submit]")
    page.wait_for_url("**/admin/rewind/upstream/add/")

    # A bad header map is refused by the form and nothing is saved.
    page.fill("#id_name", "guestshell")
    page.fill("#id_url", guestshell_http.url)
    page.fill("#id_headers", "Authorization: Bearer nope")
    page.click("input[name=_save]")
    assert "headers must be a JSON object" in page.inner_text("#id_headers_error")
    assert not Upstream.objects.exists()

    page.fill("#id_headers", json.dumps(guestshell_http.headers))
    page.click("input[name=_save]")
    page.wait_for_url("**/admin/rewind/upstream/")
    upstream = Upstream.objects.get(name="guestshell")
    assert upstream.headers() == guestshell_http.headers
    assert guestshell_http.token
    assert guestshell_http.token not in str(list(AuditEvent.objects.values_list("data", flat=True)))

    page.check(f"input[name=_selected_action][value='{upstream.pk}']")
    page.select_option("select[name=action]", "test_connection")
    page.click("button[name=index]")
    messages = page.inner_text("ul.messagelist").lower()  # the admin capitalizes each message
    assert "guestshell: ok from here, 5 tools exported" in messages
    assert "classify them before agents call them" in messages
    assert UpstreamTool.objects.filter(upstream=upstream, state="exported").count() == 5
    assert ToolSighting.objects.filter(tool__startswith="guestshell/").count() == 5

    assert "5 tools are held until a person approves their definitions" in messages

    # The mapping is shown: the exposed name beside the catalog's server/tool, each held as new.
    page.goto(f"{live_server.url}/admin/rewind/upstreamtool/")
    table = page.inner_text("#result_list")
    assert "guestshell__exec" in table
    assert "guestshell/exec" in table
    assert table.count("held: new") == 5

    # Until a person approves the definitions, an agent pointed only at /mcp does not see them.
    _agent, token = make_agent_token()
    listed = post(mcp_server.mcp_url, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, token)
    assert listed.status_code == 200
    assert "guestshell__exec" not in listed.text
    assert "zerto_guard_before_mutate" in listed.text

    # The person reads each definition (all of it, for a tool never approved) and approves what was shown.
    page.check("#action-toggle")
    page.select_option("select[name=action]", "approve_definitions")
    page.click("button[name=index]")
    page.wait_for_url("**/admin/rewind/upstreamtool/approve/**")
    shown = page.inner_text("#content-main")
    assert shown.count("(never approved)") == 5
    assert '"name": "exec"' in shown
    page.click("#approve")
    page.wait_for_url("**/admin/rewind/upstreamtool/")
    assert (
        "approved the definition of guestshell/append_line, guestshell/exec"
        in page.inner_text("ul.messagelist").lower()
    )
    assert UpstreamTool.objects.filter(upstream=upstream, approved_digest=F("digest")).count() == 5
    assert AuditEvent.objects.filter(action="gateway.tool.definition_approved").count() == 5

    # An agent now sees them (uvicorn on the same database).
    listed = post(mcp_server.mcp_url, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, token)
    assert "guestshell__exec" in listed.text
