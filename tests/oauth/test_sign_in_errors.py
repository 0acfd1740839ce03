"""In real Chromium: a person sent to connect a host with a request that will be refused never sees the
sign-in form. The request goes straight back to the host with its error, or a page says what is wrong.
And the consent page of a request that can go on chooses nothing for the person.

It used to be judged only after the sign-in, and the redirect carrying the error was held by the
sign-in page's Content Security Policy (``form-action 'self'``): the person saw the sign-in form
again with no message, and the host waited until it gave up.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx2
import pytest
from django.contrib.auth.models import User

from tests.markers import NEEDS_CHROMIUM
from tests.oauth.support import BACK_IDS, BACK_TO_THE_CLIENT, CALLBACK, authorize_query, pkce, query_of, sign_in

pytestmark = [pytest.mark.timeout(300), NEEDS_CHROMIUM]

PASSWORD = "pw-alice-12345"


def _register(base: str, redirect_uri: str = CALLBACK) -> str:
    body = {
        "client_name": "Browser-tested host",
        "redirect_uris": [redirect_uri],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
    }
    resp = httpx2.post(
        f"{base}/oauth/register/", content=json.dumps(body), headers={"Content-Type": "application/json"}
    )
    assert resp.status_code == 201, resp.text
    return str(resp.json()["client_id"])


class Host:
    """The host's loopback listener (RFC 8252) that the browser is sent back to: a real one, since
    Playwright's routes do not see the target of a redirect."""

    def __init__(self) -> None:
        host = self
        self.requests: list[str] = []

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.startswith("/callback"):  # not the browser's own /favicon.ico
                    host.requests.append(f"{host.callback}{self.path.removeprefix('/callback')}")
                body = b"You may close this window."
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.callback = f"http://127.0.0.1:{self.httpd.server_address[1]}/callback"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def host() -> Iterator[Host]:
    listening = Host()
    yield listening
    listening.stop()


class Person:
    """The browser, with every page it was shown."""

    def __init__(self, page: Any) -> None:
        self.page = page
        self.shown: list[str] = []
        page.on("framenavigated", lambda frame: self.shown.append(frame.url) if frame == page.main_frame else None)

    def open(self, url: str) -> None:
        self.shown.clear()
        self.page.goto(url)

    def saw_a_sign_in_form(self) -> bool:
        return any("/admin/login/" in url for url in self.shown) or self.page.locator("#id_username").count() > 0


def test_each_refused_request_goes_back_to_the_host_without_a_sign_in(
    mcp_server: Any, transactional_db: None, page: Any, host: Host
) -> None:
    person = Person(page)
    client_id = _register(mcp_server.url, redirect_uri=host.callback)
    _verifier, challenge = pkce()
    for (extra, error), case in zip(BACK_TO_THE_CLIENT, BACK_IDS, strict=True):
        host.requests.clear()
        query = authorize_query(
            client_id, challenge, **{"resource": mcp_server.mcp_url, "redirect_uri": host.callback, **extra}
        )
        person.open(mcp_server.url + query)
        assert page.inner_text("body") == "You may close this window.", case
        assert len(host.requests) == 1, case
        back = query_of(host.requests[0])
        assert (back["error"], back["state"]) == (error, "st-1"), case
        assert not person.saw_a_sign_in_form(), f"{case}: the sign-in form was shown for a refused request"


def test_a_request_with_no_redirect_uri_to_use_shows_what_is_wrong_without_a_sign_in(
    mcp_server: Any, transactional_db: None, page: Any
) -> None:
    person = Person(page)
    client_id = _register(mcp_server.url)
    plain_http = _register(mcp_server.url, redirect_uri="http://evil.example/cb")
    _verifier, challenge = pkce()
    cases = [
        (client_id, "https://evil.example/cb", "is not one it registered"),
        (plain_http, "http://evil.example/cb", "must be https, or http on a loopback address"),
        ("no-such-client", CALLBACK, "does not know the client that sent you here"),
    ]
    for cid, redirect_uri, said in cases:
        person.open(mcp_server.url + authorize_query(cid, challenge, redirect_uri=redirect_uri))
        shown = page.inner_text("#consent-error")
        assert said in shown
        assert "nothing was granted" in shown
        assert not person.saw_a_sign_in_form()


def test_a_request_that_can_go_on_signs_in_and_the_consent_page_names_the_scopes_left_out(
    mcp_server: Any, transactional_db: None, page: Any
) -> None:
    User.objects.create_superuser("alice", "alice@example.com", PASSWORD)
    person = Person(page)
    client_id = _register(mcp_server.url)
    _verifier, challenge = pkce()
    scope = "openid offline_access rewind:read"
    person.open(mcp_server.url + authorize_query(client_id, challenge, resource=mcp_server.mcp_url, scope=scope))
    assert person.saw_a_sign_in_form()  # the one request here that will not be refused
    sign_in(page, "alice", PASSWORD)
    page.wait_for_selector("#consent-form")
    dropped = page.inner_text("#consent-dropped")
    assert "openid" in dropped
    assert "offline_access" in dropped


def test_a_person_with_many_agents_finds_one_by_typing_and_grants_only_what_is_ticked(
    mcp_server: Any, transactional_db: None, page: Any, host: Host
) -> None:
    from rewind.agents import agent_create
    from rewind.audit import Actor
    from rewind.models import AgentGrant

    alice = User.objects.create_superuser("alice", "alice@example.com", PASSWORD)
    for i in range(22):
        agent_create(actor=Actor.system("tests"), name=f"alice-{i:02d}", owner=alice)
    client_id = _register(mcp_server.url, redirect_uri=host.callback)
    _verifier, challenge = pkce()
    query = authorize_query(
        client_id, challenge, resource=mcp_server.mcp_url, redirect_uri=host.callback, scope="rewind:read rewind:guard"
    )
    page.goto(mcp_server.url + query)
    sign_in(page, "alice", PASSWORD)
    page.wait_for_selector("#consent-form")
    assert page.locator("input[type=radio][name=agent]").count() == 0
    assert page.locator("#consent-agent-names option").count() == 22
    assert page.locator("#nav-sidebar").count() == 0
    assert page.is_checked("input[name=granted][value='rewind:read']")
    assert not page.is_checked("input[name=granted][value='rewind:guard']")
    assert "lasts 1 hour" in page.inner_text("#consent-lifetimes")
    page.fill("#id_agent", "alice-17")
    page.click("#consent-allow")
    page.wait_for_function("() => document.body.innerText.includes('close this window')")
    assert "code" in query_of(host.requests[-1])
    grant = AgentGrant.objects.get()
    assert (grant.agent.name, grant.scope) == ("alice-17", "rewind:read")
