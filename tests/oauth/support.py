"""A host that speaks only the MCP authorization flow, and a person who consents in real Chromium.

``OAuthHost`` runs the official Python SDK's OAuth client provider (discovery from the 401,
registration, PKCE, the token exchange, refreshes) with an ``mcp.Client`` on a thread of its own,
since Playwright's sync API holds the test thread's event loop. When the provider sends the person
to the authorization URL, ``consent()`` drives the browser through the admin sign-in and the consent
page, catches the redirect to the host's loopback callback, and hands the code back to the provider.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import queue
import secrets
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx2

CALLBACK = "http://127.0.0.1:33418/callback"  # nothing listens there: the browser's request is caught


class MemoryStorage:
    """The SDK's ``TokenStorage``: what the host remembers between calls."""

    def __init__(self) -> None:
        self.tokens: Any = None
        self.client_info: Any = None

    async def get_tokens(self) -> Any:
        return self.tokens

    async def set_tokens(self, tokens: Any) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> Any:
        return self.client_info

    async def set_client_info(self, client_info: Any) -> None:
        self.client_info = client_info


@dataclass
class OAuthHost:
    mcp_url: str
    client_metadata_url: str | None = None  # a Client ID Metadata Document instead of DCR
    client_name: str = "Test host"
    storage: MemoryStorage = field(default_factory=MemoryStorage)
    authorize_urls: queue.Queue[str] = field(default_factory=queue.Queue)
    callbacks: queue.Queue[str] = field(default_factory=queue.Queue)

    def provider(self) -> Any:
        from mcp.client.auth import OAuthClientProvider
        from mcp.shared.auth import AuthorizationCodeResult, OAuthClientMetadata

        async def redirect(url: str) -> None:
            self.authorize_urls.put(url)

        async def callback() -> AuthorizationCodeResult:
            url = await asyncio.to_thread(self.callbacks.get, True, 120)
            query = {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}
            if "code" not in query:
                raise RuntimeError(f"the authorization was refused: {query}")
            return AuthorizationCodeResult(code=query["code"], state=query.get("state"), iss=query.get("iss"))

        metadata = OAuthClientMetadata(
            client_name=self.client_name,
            redirect_uris=[CALLBACK],  # type: ignore[list-item]
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method="none",
        )
        return OAuthClientProvider(
            server_url=self.mcp_url,
            client_metadata=metadata,
            storage=self.storage,
            redirect_handler=redirect,
            callback_handler=callback,
            client_metadata_url=self.client_metadata_url,
        )

    async def _session(self, work: Callable[[Any], Awaitable[Any]], mode: str) -> Any:
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        async with httpx2.AsyncClient(auth=self.provider(), timeout=httpx2.Timeout(30.0, read=60.0)) as http:
            async with Client(streamable_http_client(self.mcp_url, http_client=http), mode=mode) as client:
                return await work(client)

    def start(self, work: Callable[[Any], Awaitable[Any]], mode: str = "auto") -> HostRun:
        """Run ``work(client)`` on a thread; the flow waits for ``consent`` when it needs a person."""
        run = HostRun()

        def target() -> None:
            try:
                run.result = asyncio.run(self._session(work, mode))
            except BaseException as exc:  # handed to the test thread
                run.error = exc

        run.thread = threading.Thread(target=target, daemon=True)
        run.thread.start()
        return run


@dataclass
class HostRun:
    thread: threading.Thread | None = None
    result: Any = None
    error: BaseException | None = None

    def wait(self, timeout: float = 120.0) -> Any:
        assert self.thread is not None
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the host's MCP session did not end"
        if self.error is not None:
            raise self.error
        return self.result


def sign_in(page: Any, username: str, password: str) -> None:
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("input[type=submit]")


def consent(
    page: Any,
    host: Any,  # OAuthHost or NodeOAuthHost
    *,
    agent: str | None = None,
    new_agent: str | None = None,
    tick: tuple[str, ...] = (),
    untick: tuple[str, ...] = (),
    credentials: tuple[str, str] | None = None,
    allow: bool = True,
) -> dict[str, str]:
    """The person's part: open the URL the host sent them to, sign in if asked, pick the agent, allow.

    Returns what the consent page showed (client name, redirect URI). The redirect to the host's
    callback is caught and passed to the host.
    """
    url = host.authorize_urls.get(timeout=60)
    caught: list[str] = []

    def catch(route: Any) -> None:
        caught.append(route.request.url)
        host.callbacks.put(route.request.url)
        route.fulfill(status=200, content_type="text/plain", body="You may close this window.")

    page.route(f"{CALLBACK}**", catch)
    page.goto(url)
    if credentials is not None and page.locator("#id_username").count():
        sign_in(page, *credentials)
    page.wait_for_selector("#consent-form")
    shown = {
        "client": page.inner_text("#consent-client"),
        "redirect_uri": page.inner_text("#consent-redirect"),
        "scopes": page.inner_text("#consent-granted"),
    }
    if new_agent is not None:
        page.fill("#id_new_agent", new_agent)
    elif agent is not None:
        page.get_by_label(agent, exact=True).check()
    for scope in tick:
        page.locator(f"input[name=granted][value='{scope}']").check()
    for scope in untick:
        page.locator(f"input[name=granted][value='{scope}']").uncheck()
    page.click("#consent-allow" if allow else "#consent-cancel")
    page.wait_for_function("() => document.body.innerText.includes('close this window')")
    assert caught, "the consent page did not send the browser back to the host"
    return shown


# --- The protocol by hand, in-process (Django's test client) ---------------------------------

RESOURCE = "http://testserver/mcp"


def pkce() -> tuple[str, str]:
    """(verifier, S256 challenge)."""
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
    return verifier, challenge


def register(browser: Any, redirect_uri: str = CALLBACK, name: str = "Hand-made host") -> str:
    """Dynamic Client Registration (RFC 7591) of a public client; its client_id."""
    resp = browser.post(
        "/oauth/register/",
        data=json.dumps(
            {
                "client_name": name,
                "redirect_uris": [redirect_uri],
                "grant_types": ["authorization_code", "refresh_token"],
                "response_types": ["code"],
                "token_endpoint_auth_method": "none",
            }
        ),
        content_type="application/json",
    )
    assert resp.status_code == 201, resp.content
    return str(resp.json()["client_id"])


# Each request the endpoint refuses and can say so to the client: (what differs, the error).
BACK_TO_THE_CLIENT = [
    ({"code_challenge": "", "code_challenge_method": ""}, "invalid_request"),  # no PKCE
    ({"code_challenge_method": ""}, "invalid_request"),  # a challenge without a method is "plain"
    ({"code_challenge_method": "plain"}, "invalid_request"),
    ({"resource": "https://other.example/mcp"}, "invalid_target"),
    ({"resource": "not a uri"}, "invalid_target"),
    ({"scope": "rewind:read admin"}, "invalid_scope"),
    ({"response_type": "token"}, "unauthorized_client"),
]
BACK_IDS = ["no PKCE", "challenge without method", "plain PKCE", "foreign resource", "bad resource",
            "unknown scope", "implicit"]  # fmt: skip


def authorize_query(client_id: str, challenge: str | None, **extra: str) -> str:
    params = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": CALLBACK,
        "state": "st-1",
        "scope": "rewind:read rewind:guard",
        "resource": RESOURCE,
        **({"code_challenge": challenge, "code_challenge_method": "S256"} if challenge else {}),
        **extra,
    }
    return "/oauth/authorize/?" + urlencode({k: v for k, v in params.items() if v != ""})


def consent_post(browser: Any, client_id: str, challenge: str, agent: str, **extra: str | list[str]) -> str:
    """The consent form as the page posts it; the URL the browser is sent back to."""
    form = {
        "client_id": client_id,
        "redirect_uri": CALLBACK,
        "response_type": "code",
        "state": "st-1",
        "scope": "rewind:read rewind:guard",
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "resource": RESOURCE,
        "agent": agent,
        "granted": ["rewind:read", "rewind:guard"],
        "allow": "Allow",
        **extra,
    }
    resp = browser.post("/oauth/authorize/", form)
    assert resp.status_code == 302, resp.content[:2000]
    return str(resp["Location"])


def query_of(url: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}


def token_request(browser: Any, **form: str) -> Any:
    return browser.post("/oauth/token/", form)


def exchange(browser: Any, client_id: str, code: str, verifier: str | None, **form: str) -> Any:
    """The token request for ``code`` (RFC 6749 4.1.3 with PKCE); ``form`` adds or overrides fields."""
    fields = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": CALLBACK,
        "client_id": client_id,
        **({"code_verifier": verifier} if verifier is not None else {}),
        **form,
    }
    return token_request(browser, **fields)


# --- A client's metadata document, served over HTTPS by the test -------------------------------


@dataclass
class Document:
    body: bytes
    delay_s: float = 0.0
    content_type: str = "application/json"


class DocumentServer:
    """HTTPS on 127.0.0.1 (a certificate for localhost and 127.0.0.1 from a CA of its own) serving the
    documents the test puts in ``documents`` by path; ``requests`` counts what was asked for."""

    def __init__(self, cert_dir: Any) -> None:
        import ssl
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        from zvmsim.tls import ensure_certs

        self.certs = ensure_certs(cert_dir, ["localhost", "127.0.0.1"])
        self.documents: dict[str, Document] = {}
        self.requests: list[str] = []
        self.stopping = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server.requests.append(self.path)
                doc = server.documents.get(self.path)
                if doc is None:
                    self.send_error(404)
                    return
                if doc.delay_s:
                    server.stopping.wait(doc.delay_s)
                self.send_response(200)
                self.send_header("Content-Type", doc.content_type)
                self.send_header("Content-Length", str(len(doc.body)))
                self.end_headers()
                try:
                    self.wfile.write(doc.body)
                except OSError:
                    pass  # the fetcher gave up first

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.certs.cert, self.certs.key)
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.port = int(self.httpd.server_address[1])
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str, host: str = "localhost") -> str:
        return f"https://{host}:{self.port}{path}"

    def client_document(self, path: str, name: str = "Metadata-document host", **extra: Any) -> str:
        """Serve a client's metadata document at ``path``; its client_id (the URL)."""
        client_id = self.url(path)
        doc = {
            "client_id": client_id,
            "client_name": name,
            "redirect_uris": [CALLBACK],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
            **extra,
        }
        self.documents[path] = Document(json.dumps(doc).encode())
        return client_id

    def stop(self) -> None:
        self.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()


class NodeOAuthHost:
    """The TypeScript SDK's host (tests/mcp/node/oauth_client.mjs) behind the same queues as ``OAuthHost``:
    the authorization URL it prints goes to ``authorize_urls``; the URL the browser came back to, to its stdin."""

    def __init__(self, node_dir: Any, mcp_url: str, vm: str, client_metadata_url: str | None = None) -> None:
        import subprocess

        self.authorize_urls: queue.Queue[str] = queue.Queue()
        self.callbacks: queue.Queue[str] = queue.Queue()
        self.lines: queue.Queue[dict[str, Any]] = queue.Queue()
        argv = ["node", "oauth_client.mjs", mcp_url, vm, *([client_metadata_url] if client_metadata_url else [])]
        self.proc = subprocess.Popen(
            argv, cwd=node_dir, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._write, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            message = json.loads(line)
            if "authorize" in message:
                self.authorize_urls.put(message["authorize"])
            else:
                self.lines.put(message)

    def _write(self) -> None:
        assert self.proc.stdin is not None
        url = self.callbacks.get()
        self.proc.stdin.write(url + "\n")
        self.proc.stdin.flush()

    def result(self, timeout: float = 120.0) -> dict[str, Any]:
        try:
            out = self.lines.get(timeout=timeout)
        finally:
            self.proc.wait(timeout=30)
        assert "error" not in out, f"{out['error']}\n{self.proc.stderr.read() if self.proc.stderr else ''}"
        return out


def oauth_token(
    person: Any, agent: Any, *, scope: str = "rewind:read rewind:guard", resource: str, expires_in_s: int = 3600
) -> str:
    """An access token as a consent and a token exchange leave it: a public client, its grant, the token
    (stored as its SHA-256), bound to ``resource``. For tests about the token, not the flow."""
    from datetime import timedelta

    from django.utils import timezone
    from oauth2_provider.models import AccessToken, Application, set_token_value

    from rewind.audit import Actor
    from rewind.oauth.services import agent_grant_create

    app = Application.objects.create(
        name="Minted host",
        client_type=Application.CLIENT_PUBLIC,
        authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
        redirect_uris=CALLBACK,
        client_id=f"minted-{secrets.token_hex(6)}",
    )
    agent_grant_create(
        actor=Actor.user(person.get_username()),
        user=person,
        application=app,
        agent=agent,
        granted=tuple(scope.split()),
        redirect_uri=CALLBACK,
    )
    raw = secrets.token_urlsafe(30)
    token = AccessToken(
        user=person,
        application=app,
        expires=timezone.now() + timedelta(seconds=expires_in_s),
        scope=scope,
        resource=[resource],
    )
    set_token_value(token, raw)
    token.save()
    return raw


class ReverseProxy:
    """An HTTP reverse proxy on 127.0.0.1 that forwards to ``upstream`` with Host set to the upstream's address,
    as nginx does by default (``proxy_set_header Host $proxy_host``): the service never sees the public Host."""

    def __init__(self, upstream_port: int, listen_port: int = 0) -> None:
        import http.client
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.seen_hosts: list[str] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                headers["Host"] = f"127.0.0.1:{upstream_port}"
                proxy.seen_hosts.append(headers["Host"])
                conn = http.client.HTTPConnection("127.0.0.1", upstream_port, timeout=60)
                try:
                    conn.request(self.command, self.path, body=body, headers=headers)
                    resp = conn.getresponse()
                    data = resp.read()
                finally:
                    conn.close()
                self.send_response(resp.status, resp.reason)
                for key, value in resp.getheaders():
                    if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = _forward

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.httpd = ThreadingHTTPServer(("127.0.0.1", listen_port), Handler)
        self.httpd.daemon_threads = True
        self.port = int(self.httpd.server_address[1])
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@dataclass
class ProxiedServer:
    upstream: Any  # tests.mcpfixtures.UvicornServer
    proxy: ReverseProxy
    public_url: str

    @property
    def mcp_url(self) -> str:
        return f"{self.public_url}/mcp"
