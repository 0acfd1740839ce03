"""A person connects an agent from its admin page in real Chromium, and the token shown works."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.urls import reverse

from rewind.agents import agent_create
from rewind.audit import Actor
from rewind.models import AgentToken
from tests.helpers import post
from tests.markers import NEEDS_CHROMIUM
from tests.mcp.support import connection_of, token_in

pytestmark = [
    pytest.mark.timeout(300),
    NEEDS_CHROMIUM,
]


def test_a_person_connects_an_agent_and_the_token_shown_works(
    live_server: Any, mcp_server: Any, page: Any, settings: Any
) -> None:
    settings.REWIND_PUBLIC_URL_CONFIGURED = False  # the page gives the address it was opened at
    root = User.objects.create_superuser("root", "root@example.com", "pw-root-12345")
    agent = agent_create(actor=Actor.system("tests"), name="browser-bot", owner=root)
    change = reverse("admin:rewind_agent_change", args=[agent.pk])

    page.goto(f"{live_server.url}/admin/login/?next={change}")
    page.fill("#id_username", "root")
    page.fill("#id_password", "pw-root-12345")
    page.click("input[type=submit]")
    page.wait_for_url(f"**{change}")
    page.click("#connect-agent")
    assert "Connect agent browser-bot" in page.inner_text("#content")
    assert not AgentToken.objects.exists()  # opening the page issued nothing

    page.check("input[value=cursor]")
    page.click("#issue")
    # Cursor reads the token from the environment: the file names the variable, the page the token, once.
    token = token_in(page.inner_text("#client-token"))
    url, headers = connection_of("cursor", page.inner_text("#client-config"), token)
    assert url == f"{live_server.url}/mcp"
    assert headers == {"Authorization": f"Bearer {token}"}
    assert token not in page.inner_text("#client-config")
    assert AgentToken.objects.get().token_hash == hashlib.sha256(token.encode()).hexdigest()
    assert "~/.cursor/mcp.json" in page.inner_text("#client-where")
    assert ".cursor/skills/" in page.inner_text("#client-skill")

    # The live server here is Django's own and has no /mcp; uvicorn on the same database does.
    # Playwright holds this thread's event loop, so the check is one plain POST.
    listed = post(mcp_server.mcp_url, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, token)
    assert listed.status_code == 200
    assert "zerto_guard_before_mutate" in listed.text
