"""Client configurations: each is what its client accepts as it is, keeps the token where the client reads a
secret (unless it cannot), has a URL-only variant for OAuth sign-in, and what mcpconfig prints connects."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from rewind.agents.models import AgentToken
from rewind.lib.processes import stack_forget, stack_record
from rewind.mcp.clientconfig import CLIENTS, OAUTH_ONLY, client_config
from rewind.mcp.endpoint import mcp_public_url
from tests.helpers import run
from tests.mcp.support import connection_of, token_in
from tests.mcpfixtures import open_mcp_client
from tests.simfixtures import PYTHON, REPO

URL = "https://rewind.example.com/mcp"
TOKEN = "rwd_example-token-0123456789abcdef"
TOKEN_CLIENTS = [c for c in CLIENTS if c not in OAUTH_ONLY]
# Clients that read a secret from the environment or a prompt: the file they keep holds none.
READS_A_SECRET = ["claude-code", "vscode", "cursor", "opencode"]


@pytest.mark.parametrize(
    ("client", "servers_key"),
    [
        ("claude-desktop", "mcpServers"),
        ("vscode", "servers"),
        ("cursor", "mcpServers"),
        ("opencode", "mcp"),
        ("json", "mcpServers"),
    ],
)
def test_each_json_configuration_parses_and_names_the_server(client: str, servers_key: str) -> None:
    for token in (TOKEN, None):
        config = client_config(client, url=URL, token=token).config
        if client == "claude-desktop" and token is None:
            assert config == URL  # a custom connector takes the URL only
            continue
        assert isinstance(json.loads(config)[servers_key]["zerto-rewind"], dict)


@pytest.mark.parametrize("client", TOKEN_CLIENTS)
def test_each_client_sends_the_bearer_token_as_it_reads_it(client: str) -> None:
    config = client_config(client, url=URL, token=TOKEN)
    url, headers = connection_of(client, config.config, TOKEN)
    assert url == URL
    assert headers == {"Authorization": f"Bearer {TOKEN}"}


@pytest.mark.parametrize("client", READS_A_SECRET)
def test_the_file_holds_no_token_where_the_client_reads_a_secret(client: str) -> None:
    config = client_config(client, url=URL, token=TOKEN)
    assert TOKEN not in config.config
    assert all(TOKEN not in text for _, text in config.also)
    assert TOKEN in config.token_step  # told once, beside it


def test_claude_codes_project_file_is_pasted_as_it_is_and_holds_no_secret() -> None:
    config = client_config("claude-code", url=URL, token=TOKEN)
    [(where, text)] = config.also
    assert ".mcp.json" in where
    entry = json.loads(text)["mcpServers"]["zerto-rewind"]  # nothing around it: it parses as printed
    assert entry == {"type": "http", "url": URL}  # each person signs in
    assert config.token_step.startswith(f"export ZERTO_REWIND_TOKEN='{TOKEN}'")


@pytest.mark.parametrize("client", list(CLIENTS))
def test_the_oauth_variant_is_the_url_only(client: str) -> None:
    config = client_config(client, url=URL, token=None)
    assert connection_of(client, config.config, None) == (URL, {})
    assert config.token_step == ""
    assert "sign in" in config.guide()


@pytest.mark.parametrize("client", sorted(OAUTH_ONLY))
def test_hosted_connectors_never_get_a_token(client: str) -> None:
    config = client_config(client, url=URL, token=TOKEN)
    assert TOKEN not in config.as_text()
    assert "calls this URL from the internet" in config.guide()
    assert "will NOT work" not in config.guide()


@pytest.mark.parametrize("client", sorted(OAUTH_ONLY))
@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://127.0.0.1:8000/mcp", "it is plain http, not https; 127.0.0.1 is an address of this machine"),
        ("https://localhost:8443/mcp", "localhost is an address of this machine"),
        ("https://10.1.2.3/mcp", "10.1.2.3 is an address of this machine or its network"),
        ("http://rewind.example.com/mcp", "it is plain http, not https."),
    ],
    ids=["loopback http", "localhost", "private network", "plain http"],
)
def test_a_hosted_connector_is_told_plainly_when_its_url_cannot_work(client: str, url: str, why: str) -> None:
    """It printed a loopback http URL while saying the URL must be the public https address."""
    guide = client_config(client, url=url, token=None).guide()
    assert "This URL will NOT work for" in guide
    assert why in guide
    assert "Set REWIND_PUBLIC_URL to the public https address" in guide


def test_every_client_says_where_its_configuration_and_skill_go() -> None:
    for client in CLIENTS:
        guide = client_config(client, url=URL, token=TOKEN).guide()
        assert "put the configuration in" in guide
        assert "kill" in guide


def test_an_unknown_client_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unknown client 'emacs'; choose one of claude-code"):
        client_config("emacs", url=URL, token=TOKEN)


def test_mcpconfig_prints_the_configuration_alone_and_it_connects_as_printed(
    mcp_server: Any, transactional_db: None, owner: Any, settings: Any
) -> None:
    # Beside a running stack the command finds its address without being told (here: uvicorn's port).
    settings.REWIND_PUBLIC_URL_CONFIGURED = False
    stack_record(settings.VAR_DIR, mcp_server.url)
    try:
        for client in TOKEN_CLIENTS:
            out, err = StringIO(), StringIO()
            call_command("mcpconfig", "cfg-bot", "--client", client, stdout=out, stderr=err)
            token = token_in(out.getvalue() + err.getvalue())
            url, headers = connection_of(client, out.getvalue(), token)
            assert url == mcp_server.mcp_url
            assert headers == {"Authorization": f"Bearer {token}"}
            assert _tool_names(url, token) >= {"zerto_guard_before_mutate", "zerto_recover_file"}
        assert AgentToken.objects.filter(agent__name="cfg-bot").count() == len(TOKEN_CLIENTS)
        out, err = StringIO(), StringIO()
        call_command("mcpconfig", "--client", "claude-ai", stdout=out, stderr=err)
        assert out.getvalue().strip() == mcp_server.mcp_url
    finally:
        stack_forget(settings.VAR_DIR)
    assert mcp_public_url() == f"{settings.REWIND_PUBLIC_URL}/mcp"  # no stack running: the default


@pytest.mark.process
def test_mcpconfig_uses_rewind_port(mcp_server: Any, transactional_db: None, owner: Any, tmp_path: Any) -> None:
    env = {**os.environ, "REWIND_PORT": str(mcp_server.port), "REWIND_VAR_DIR": str(tmp_path)}
    env.pop("REWIND_PUBLIC_URL", None)
    from tests.helpers import test_database_url

    env["DATABASE_URL"] = test_database_url()
    done = subprocess.run(
        [PYTHON, "manage.py", "mcpconfig", "port-bot", "--client", "cursor"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    token = token_in(done.stderr)
    url, _headers = connection_of("cursor", done.stdout, token)
    assert url == f"http://127.0.0.1:{mcp_server.port}/mcp"
    assert AgentToken.objects.get(agent__name="port-bot").token_hash == hashlib.sha256(token.encode()).hexdigest()
    assert "zerto_find_protection" in _tool_names(url, token)


def _tool_names(url: str, token: str) -> set[str]:
    async def go() -> set[str]:
        async with open_mcp_client(url, token) as client:
            return {tool.name for tool in (await client.list_tools()).tools}

    return set(run(go()))


def test_mcpconfig_refuses_an_unknown_client_a_bad_url_and_a_missing_agent(db: None, owner: Any) -> None:
    with pytest.raises(CommandError, match="invalid choice: 'emacs'"):
        call_command("mcpconfig", "cfg-bot", "--client", "emacs", stdout=StringIO(), stderr=StringIO())
    with pytest.raises(CommandError, match="--url must be an http"):
        call_command("mcpconfig", "cfg-bot", "--url", "ftp://x/mcp", stdout=StringIO(), stderr=StringIO())
    with pytest.raises(CommandError, match="name the agent"):
        call_command("mcpconfig", "--client", "cursor", stdout=StringIO(), stderr=StringIO())
    assert not AgentToken.objects.exists()


def test_mcpconfig_issues_a_token_with_the_scopes_asked_for(db: None, owner: Any) -> None:
    err = StringIO()
    call_command("mcpconfig", "ro-bot", "--scope", "rewind:read", "--client", "json", stdout=StringIO(), stderr=err)
    assert AgentToken.objects.get(agent__name="ro-bot").scope == "rewind:read"


@pytest.fixture
def owner(db: None) -> Any:
    from django.contrib.auth import get_user_model

    return get_user_model().objects.create_superuser("root-owner", password="pw-root-owner-1")


def test_mcpconfig_issued_again_revokes_the_token_it_replaces(db: None, owner: Any) -> None:
    from rewind.models import AuditEvent

    def issue(client: str) -> tuple[str, str]:
        out, err = StringIO(), StringIO()
        call_command("mcpconfig", "re-bot", "--client", client, stdout=out, stderr=err)
        return token_in(out.getvalue() + err.getvalue()), err.getvalue()

    call_command("createagent", "re-bot", stdout=StringIO(), stderr=StringIO())  # a token of its own, kept
    first, _said = issue("cursor")
    other_client, _said = issue("vscode")
    second, said = issue("cursor")
    live = {t.token_hash for t in AgentToken.objects.filter(agent__name="re-bot", revoked_at__isnull=True)}
    assert hashlib.sha256(first.encode()).hexdigest() not in live
    assert {hashlib.sha256(t.encode()).hexdigest() for t in (second, other_client)} <= live
    assert len(live) == 3  # createagent's, vscode's and the new cursor one
    assert f"revoked token {first[:10]}… (mcpconfig cursor, issued " in said
    revoked = AgentToken.objects.get(token_hash=hashlib.sha256(first.encode()).hexdigest())
    assert AuditEvent.objects.filter(action="agent.token.revoked", target_id=str(revoked.pk)).exists()
