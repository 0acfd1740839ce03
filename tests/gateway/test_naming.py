"""Exposed names that real hosts accept, collisions refused at listing, and upstream settings' bad input."""

from __future__ import annotations

import html
import json
import re
from typing import Any

import pytest

from catalog.models import ToolSighting
from rewind.audit import Actor
from rewind.gateway.models import Upstream, UpstreamTool
from rewind.gateway.naming import MAX_LEN, exposed_name
from rewind.gateway.services import (
    ListedTool,
    upstream_create,
    upstream_tools_approve_listed,
    upstream_tools_record,
    upstream_update,
)
from rewind.lib.errors import ApplicationError
from rewind.models import AuditEvent

ADMIN = Actor.user("admin")
HOSTS_ACCEPT = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")  # the narrowest: OpenAI-style functions, Windsurf


def listed(name: str, **schema: Any) -> ListedTool:
    return ListedTool(name, "", "", {"type": "object", "properties": schema}, None, None, None)


@pytest.mark.parametrize(
    ("server", "tool", "expected"),
    [
        ("ssh", "exec", "ssh__exec"),
        ("ansible", "playbook.run", "ansible__playbook_run"),
        ("smb", "files/write", "smb__files_write"),
        ("ps", "Invoke Command", "ps__Invoke_Command"),
    ],
)
def test_exposed_names_use_only_what_every_host_accepts(server: str, tool: str, expected: str) -> None:
    assert exposed_name(server, tool) == expected


def test_a_long_name_is_shortened_the_same_way_every_time_with_a_hash() -> None:
    long_tool = "a-very-long-tool-name-that-no-host-would-take-as-is"
    name = exposed_name("windows-remote", long_tool)
    assert len(name) == MAX_LEN
    assert HOSTS_ACCEPT.match(name)
    assert name == exposed_name("windows-remote", long_tool)
    assert name != exposed_name("windows-remote", long_tool + "2")
    # Claude Code's prefix mcp__<server>__ still fits in 64 with a server name of up to 17 characters.
    assert len(f"mcp__{'z' * 17}__{name}") <= 64


def test_our_own_tool_names_never_look_like_an_exposed_name() -> None:
    from rewind.mcp.server import tool_modules

    assert tool_modules()  # the check below must look at something
    from rewind.agents.mcp_auth import AgentTokenStore
    from rewind.mcp.server import build_server

    server = build_server(token_stores=[AgentTokenStore()])
    own = [t.name for t in server._tool_manager.list_tools()]
    assert own
    assert all("__" not in n for n in own), own


def test_a_tool_whose_name_is_taken_is_refused_at_listing_and_says_why(db: None) -> None:
    first = upstream_create(actor=ADMIN, name="a", url="http://127.0.0.1:1/mcp")
    second = upstream_create(actor=ADMIN, name="a__b", url="http://127.0.0.1:2/mcp")
    upstream_tools_record(upstream=first, listed=[listed("b__exec", host={"type": "string"})], reserved=set())
    report = upstream_tools_record(upstream=second, listed=[listed("exec"), listed("read")], reserved=set())
    assert report.collisions == ["exec"]
    assert report.exported == ["read"]
    refused = UpstreamTool.objects.get(upstream=second, name="exec")
    assert refused.state == "collision"
    assert "a__b__exec" in refused.problem
    # Within one listing too: two spellings that map to the same exposed name.
    report = upstream_tools_record(upstream=first, listed=[listed("x.y"), listed("x_y")], reserved=set())
    assert report.exported == ["x.y"]
    assert report.collisions == ["x_y"]
    assert UpstreamTool.objects.get(upstream=first, name="b__exec").state == "gone"


def test_listing_makes_sightings_with_a_suggested_vm_argument(db: None) -> None:
    up = upstream_create(actor=ADMIN, name="win", url="http://127.0.0.1:1/mcp")
    report = upstream_tools_record(
        upstream=up,
        listed=[listed("run", ComputerName={"type": "string"}, script={"type": "string"}), listed("ping", target={})],
        reserved=set(),
    )
    assert sorted(report.new_sightings) == ["ping", "run"]
    assert ToolSighting.objects.get(tool="win/run").suggested_vm_arg == "ComputerName"
    assert ToolSighting.objects.get(tool="win/ping").suggested_vm_arg == "target"
    again = upstream_tools_record(upstream=up, listed=[listed("run")], reserved=set())
    assert again.new_sightings == []


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"name": "SSH server"}, "an upstream name is"),
        ({"name": "ssh", "url": "ftp://h/mcp"}, "http(s) URL"),
        ({"name": "ssh", "url": "https://user:pw@h/mcp"}, "not in its URL"),
        ({"name": "ssh", "url": "http://127.0.0.1:8000/mcp"}, "this service's own MCP endpoint"),
        ({"name": "ssh", "transport": "stdio", "command": []}, "needs its command as a list"),
        ({"name": "ssh", "transport": "stdio", "command": "npx ssh-mcp"}, "needs its command as a list"),
        ({"name": "ssh", "transport": "carrier-pigeon"}, "transport must be"),
        ({"name": "ssh", "url": "https://h/mcp", "connect_timeout_s": 0}, "connect_timeout_s"),
        ({"name": "ssh", "url": "https://h/mcp", "call_timeout_s": float("nan")}, "call_timeout_s"),
        ({"name": "ssh", "url": "https://h/mcp", "default_policy": "yolo"}, "default_policy"),
        ({"name": "ssh", "url": "https://h/mcp", "headers": {"Bad Header": "x"}}, "not a valid name"),
        ({"name": "ssh", "url": "https://h/mcp", "headers": {"X-A": "a\r\nX-B: b"}}, "one line"),
    ],
)
def test_bad_upstream_settings_are_refused_and_change_nothing(db: None, fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ApplicationError, match=re.escape(message)):
        upstream_create(actor=ADMIN, **fields)
    assert not Upstream.objects.exists()
    assert not AuditEvent.objects.filter(action__startswith="gateway.").exists()


def test_credentials_are_stored_encrypted_and_never_audited(db: None) -> None:
    up = upstream_create(actor=ADMIN, name="ssh", url="https://h/mcp", headers={"Authorization": "Bearer s3cret-value"})
    up.refresh_from_db()
    assert "s3cret-value" not in up.headers_encrypted
    assert up.headers() == {"Authorization": "Bearer s3cret-value"}
    upstream_update(actor=ADMIN, upstream=up, headers={"Authorization": "Bearer other-s3cret"})
    audited = str(list(AuditEvent.objects.values_list("data", flat=True)))
    assert "s3cret" not in audited
    assert "Authorization" in audited  # the names are, so a reader sees what changed


def test_metrics_count_gateway_calls_tools_and_failing_upstreams(db: None, client: Any, settings: Any) -> None:
    from rewind.gateway.services import gateway_call_record, upstream_listing_failed
    from tests.helpers import METRICS_TOKEN, scrape, value

    settings.REWIND_METRICS_TOKEN = METRICS_TOKEN
    settings.REWIND_METRICS_ALLOWED_NETWORKS = []
    up = upstream_create(actor=ADMIN, name="ssh", url="http://127.0.0.1:1/mcp")
    upstream_tools_record(upstream=up, listed=[listed("exec"), listed("read")], reserved=set())
    tool = UpstreamTool.objects.get(upstream=up, name="exec")
    for decision in ("passed", "passed", "held"):
        gateway_call_record(
            agent_name="a", agent_id=None, tool=tool, arguments={}, request_id="r", decision=decision, reason=""
        )
    upstream_listing_failed(upstream=up, error="upstream ssh is unavailable")
    samples = scrape(client)
    assert value(samples, "rewind_gateway_calls_total", upstream="ssh", decision="passed", outcome="forwarded") == 2
    assert value(samples, "rewind_gateway_calls_total", upstream="ssh", decision="held", outcome="not_forwarded") == 1
    assert value(samples, "rewind_gateway_tools", upstream="ssh", state="exported") == 2
    assert value(samples, "rewind_gateway_upstream_listing_failed", upstream="ssh") == 1


@pytest.mark.django_db(transaction=True)  # the read runs on a thread of its own, with its own connection
def test_agents_listing_at_once_share_one_read_and_each_sees_the_tools(monkeypatch: Any) -> None:
    import asyncio

    import rewind.gateway.mcp_tools as gateway_tools
    from tests.helpers import run

    up = upstream_create(actor=ADMIN, name="win", url="http://127.0.0.1:1/mcp")
    upstream_tools_record(upstream=up, listed=[listed("run"), listed("ping")], reserved=set())
    upstream_tools_approve_listed(actor=ADMIN, upstream=up)
    reads: list[int] = []
    exported = gateway_tools.exported_tools

    def counted() -> list[UpstreamTool]:
        reads.append(1)
        return exported()

    monkeypatch.setattr(gateway_tools, "exported_tools", counted)
    provider = gateway_tools.GatewayTools()

    async def fleet() -> list[list[str]]:
        listings = await asyncio.gather(*(provider.tools() for _ in range(20)))
        return [[t.name for t in tools] for tools in listings]

    listings = run(fleet())
    assert listings == [["win__ping", "win__run"]] * 20
    assert len(reads) <= 2, "the first read, and at most one more for the calls that came while it ran"


CREDENTIAL = "cred-in-settings-5be1"


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        (
            {"url": f"https://user:{CREDENTIAL}@mcp.example.com/mcp"},
            "not in its URL (it holds a user name or password)",
        ),
        ({"url": f"https://{CREDENTIAL}@mcp.example.com/mcp"}, "not in its URL (it holds a user name or password)"),
        ({"url": f"https://mcp.example.com/mcp?api_key={CREDENTIAL}"}, "not in its URL (its query names api_key)"),
        ({"url": f"https://mcp.example.com/mcp?profile=ops&access-token={CREDENTIAL}"}, "its query names access-token"),
        ({"url": f"https://mcp.example.com/mcp?key={CREDENTIAL}&sig=x"}, "its query names key, sig"),
        ({"url": f"https://mcp.example.com/mcp#{CREDENTIAL}"}, "without a fragment"),
        ({"transport": "stdio", "command": ["ssh-mcp", "--token", CREDENTIAL]}, "argument 2 of the command is --token"),
        ({"transport": "stdio", "command": ["ssh-mcp", f"--api-key={CREDENTIAL}"]}, "argument 2 of the command sets"),
        ({"transport": "stdio", "command": ["env", f"GITHUB_TOKEN={CREDENTIAL}", "gh-mcp"]}, "sets GITHUB_TOKEN"),
        (
            {
                "transport": "stdio",
                "command": ["mcp-remote", "https://x/mcp", "--header", f"Authorization: {CREDENTIAL}"],
            },
            "argument 4 of the command is an Authorization header or a bearer token",
        ),
        (
            {"transport": "stdio", "command": ["mcp-remote", f"--header=X-Key:Bearer {CREDENTIAL}"]},
            "argument 2 of the command is an Authorization header or a bearer token",
        ),
        (
            {"transport": "stdio", "command": ["npx", "server-postgres", f"postgresql://u:{CREDENTIAL}@db/x"]},
            "argument 3 of the command is a URL with a user name or password",
        ),
    ],
)
def test_a_credential_in_an_upstreams_url_or_command_is_refused_everywhere_and_never_quoted(
    db: None, admin_client: Any, fields: dict[str, Any], said: str
) -> None:
    """The URL and command are stored, shown and audited as given: a credential there would reach the audit log."""
    with pytest.raises(ApplicationError, match=re.escape(said)) as raised:
        upstream_create(actor=ADMIN, name="ssh", **fields)
    assert CREDENTIAL not in str(raised.value)
    if fields.get("transport") == "stdio":
        assert '["sh", "-c"' in str(raised.value)  # where it goes instead
    api = admin_client.post("/api/gateway/upstreams/", {"name": "ssh", **fields}, content_type="application/json")
    assert api.status_code == 400
    assert said in api.content.decode()
    assert CREDENTIAL not in api.content.decode()
    form = {
        "name": "ssh",
        "transport": fields.get("transport", "http"),
        "url": fields.get("url", ""),
        "command_json": json.dumps(fields.get("command", [])),
        "headers": "",
        "env": "",
        "enabled": "on",
        "connect_timeout_s": "10",
        "call_timeout_s": "300",
        "default_policy": "guard-if-protected",
        "tools-TOTAL_FORMS": "0",
        "tools-INITIAL_FORMS": "0",
    }
    page = admin_client.post("/admin/rewind/upstream/add/", form)
    assert page.status_code == 200
    assert html.escape(said) in page.content.decode()
    assert not Upstream.objects.exists()
    assert not AuditEvent.objects.exists()


def test_a_credential_already_stored_is_refused_at_the_next_edit(db: None) -> None:
    up = upstream_create(actor=ADMIN, name="ssh", url="https://h/mcp")
    Upstream.objects.filter(pk=up.pk).update(url=f"https://h/mcp?token={CREDENTIAL}")  # stored before the check
    up.refresh_from_db()
    with pytest.raises(ApplicationError, match="its query names token"):
        upstream_update(actor=ADMIN, upstream=up, enabled=False)
    assert AuditEvent.objects.filter(action="gateway.upstream.changed").count() == 0


@pytest.mark.parametrize(
    "fields",
    [
        {"url": "https://h/mcp?profile=ops&toolsets=repos,issues"},
        {"url": "https://h/mcp?monkey=1&author=x&passthrough=y"},
        {"transport": "stdio", "command": ["ssh-mcp", "--key", "/etc/ssh/id_ed25519", "--port", "22"]},
        {"transport": "stdio", "command": ["ssh-mcp", "--no-auth", "--auth-mode", "agent", "--tls-key=./k.pem"]},
        {"transport": "stdio", "command": ["npx", "server-postgres", "postgresql://db.internal/x"]},
        {"transport": "stdio", "command": ["mcp-remote", "https://x/mcp", "--header", "X-Team: ops"]},
        {"transport": "stdio", "command": ["sh", "-c", 'exec the-server --token "$THE_TOKEN"']},  # the refusal's hint
    ],
)
def test_urls_and_commands_without_credentials_pass(db: None, fields: dict[str, Any]) -> None:
    up = upstream_create(actor=ADMIN, name="ssh", **fields)
    assert (up.url, up.command) == (fields.get("url", ""), fields.get("command", []))
