"""A JSON-RPC fuzzer against /mcp, in each protocol era: hostile messages are refused, never a 5xx,
never a traceback in the server's log, never a ZVM request.

Each case is a message that must be refused (by construction): bytes that are not JSON, JSON that
is not one JSON-RPC message, unknown methods and tools, arguments a tool does not take or of the
wrong JSON type, huge and deeply nested values, VM names holding NUL, control and format characters
(RTL overrides, zero-width), ``..`` or lists, guest paths that climb (``..``), are relative or hold
control characters, change ids and actions that try to smuggle ``|`` or control characters into a
tag. Every answer must be a refusal the client can read (an HTTP 4xx with a JSON-RPC error, a
JSON-RPC error, or a tool error), short (no input echoed whole), and the simulator, which counts
every request each site gets, must have had none at the end. A second, smaller run sends VM names
a ZVM may hold though they look odd (combining marks, other scripts, emoji): those are asked about,
and must be answered without a 5xx either.

Sizes: ``REWIND_FUZZ_MCP_CASES`` refused cases per era (default 1000) and a sixth of that odd-but-
valid; the test prints its counts and time. ``REWIND_FUZZ_MCP_CASES=20000`` is the long run.
"""

from __future__ import annotations

import json
import os
import string
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fixtures import register_sites
from tests.helpers import LEGACY, install_starter_catalog, test_database_url
from tests.mcpfixtures import UvicornServer, make_agent_token, run_uvicorn

pytestmark = [pytest.mark.process, pytest.mark.timeout(600)]

CASES = int(os.environ.get("REWIND_FUZZ_MCP_CASES", "1000"))
MODERN = "2026-07-28"
SLUGS = ("site-a", "site-b")
# An answer to a refused call says why in a sentence or a few (a tool's expected formats included),
# never the input whole: the inputs below reach tens of kilobytes.
MAX_ANSWER_BYTES = 6000

TOOLS: dict[str, dict[str, str]] = {  # each tool's arguments and their JSON types
    "zerto_find_protection": {"vm": "string"},
    "zerto_create_tagged_checkpoint": {
        "vm": "string", "action": "string", "change_id": "string", "wait": "boolean", "timeout_s": "number",
    },
    "zerto_guard_before_mutate": {
        "tool": "string", "arguments": "object", "action": "string", "change_id": "string", "wait": "boolean",
    },
    "zerto_checkpoint_status": {"id": "integer"},
    "zerto_recover_file": {"vm": "string", "path": "string", "reason": "string", "change_id": "string", "wait": "boolean"},
    "zerto_recovery_status": {"id": "integer"},
    "zerto_list_flr_sessions": {"live_only": "boolean"},
    "zerto_end_flr_session": {"session_id": "string", "confirmed": "boolean"},
    "zerto_add_mutating_tool": {"tool": "string", "vm_arg": "string", "description": "string", "platform": "string"},
}  # fmt: skip

# --- values ------------------------------------------------------------------------------------------

json_leaf = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=30),
)  # fmt: skip
json_value = st.recursive(
    json_leaf, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)  # fmt: skip
# Values of the wrong JSON type for an argument; never null, which an optional argument takes.
WRONG_FOR = {
    "string": st.one_of(st.integers(), st.booleans(), st.lists(st.text(max_size=5), max_size=3), st.just({})),
    "boolean": st.one_of(st.sampled_from(["true", "yes", "1", "True", ""]), st.integers(0, 2), st.just([True])),
    "integer": st.one_of(st.sampled_from([True, False, "3", 3.5, 0, -1, [1]]), st.text(max_size=5)),
    "number": st.one_of(st.sampled_from(["5", True, 0, -3, 1e9]), st.lists(st.integers(), max_size=2)),
    "object": st.one_of(st.text(max_size=10), st.integers(), st.lists(st.integers(), max_size=3)),
}  # fmt: skip
NEVER_IN_A_NAME = [
    "\x00",
    "\x07",
    "\x1b",
    "\n",
    "\t",
    "\u202e",
    "\u202d",
    "\u2066",
    "\u200b",
    "\u200d",
    "\ufeff",
    "\u2028",
]
text = st.text(alphabet=string.ascii_letters + string.digits + ".-_", min_size=1, max_size=12)


@st.composite
def bad_vm(draw: Any) -> str:
    # Something after the odd character: white space at either end is stripped, as a name's would be.
    head, tail = draw(text), draw(st.text(alphabet=string.ascii_letters + string.digits, min_size=1, max_size=8))
    kind = draw(st.sampled_from(["char", "traversal", "list", "long"]))
    if kind == "char":
        return head + draw(st.sampled_from(NEVER_IN_A_NAME)) + tail
    if kind == "traversal":
        return draw(st.sampled_from(["../../etc", "..", "..\\..\\windows", "web01/../../x", "a/..", "../" + head]))
    if kind == "list":
        return head + draw(st.sampled_from([",", ";", ", ", " ;"])) + draw(text)
    # No "@" or ":" in the filler: the guard reads the host of user@host and host:port, which could be short.
    return head * (256 // len(head) + 1) + draw(st.text(st.characters(exclude_characters="@:"), max_size=5000))


@st.composite
def bad_path(draw: Any) -> str:
    name = draw(text)
    return draw(
        st.sampled_from(
            [
                f"/etc/../{name}", f"/../../{name}", f"/etc/./{name}", f"C:\\..\\{name}", f"C:/inetpub/../../{name}",
                f"etc/{name}", f"..\\{name}", f"\\\\server\\share\\{name}", f"/etc/{name}\x00.conf",
                f"/etc/\u202e{name}\n", "", "   ", "/", "C:\\", f"/etc/{name}/", "/" + "a" * 1100,
                f"/etc\\{name}", f"C:\\dir\\{name}|x", f"C:\\dir\\{name}?",
            ]
        )
    )  # fmt: skip


@st.composite
def smuggling(draw: Any) -> str:
    """A change id that would carry ``|``, white space or control characters into the tag, or is too long."""
    head = draw(text)
    return draw(
        st.sampled_from(
            [f"{head} | vm=other", f"{head}|x", f"{head}\nx", f"{head}\x00", f"a {head}", "x" * 101, f"{head}\u202ex"]
        )
    )


def nested(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = [value]
    return value


# --- refused calls ------------------------------------------------------------------------------------


@st.composite
def refused_call(draw: Any) -> tuple[str, dict[str, Any]]:
    tool = draw(st.sampled_from(sorted(TOOLS)))
    params = TOOLS[tool]
    valid: dict[str, dict[str, Any]] = {
        "zerto_find_protection": {"vm": "web01"},
        "zerto_create_tagged_checkpoint": {"vm": "web01", "action": "edit nginx.conf", "wait": False},
        "zerto_guard_before_mutate": {"tool": "ssh/exec", "arguments": {"host": "web01"}, "action": "edit", "wait": False},
        "zerto_checkpoint_status": {"id": 1},
        "zerto_recover_file": {"vm": "web01", "path": "/etc/hostname", "reason": "fuzz", "wait": False},
        "zerto_recovery_status": {"id": 1},
        "zerto_list_flr_sessions": {"live_only": True},
        "zerto_end_flr_session": {"session_id": "s-1", "confirmed": True},
        "zerto_add_mutating_tool": {"tool": "fuzz/tool", "vm_arg": "host", "description": "fuzz"},
    }  # fmt: skip
    args = valid[tool]
    kinds = ["unknown_argument", "wrong_type", "deep"]
    if "vm" in params or tool == "zerto_guard_before_mutate":
        kinds += ["bad_vm", "bad_vm", "huge"]
    if tool == "zerto_recover_file":
        kinds += ["bad_path", "bad_path"]
    if tool in ("zerto_create_tagged_checkpoint", "zerto_guard_before_mutate"):
        kinds += ["smuggled_change_id", "empty_action"]
    kind = draw(st.sampled_from(kinds))
    if kind == "unknown_argument":
        key = draw(st.text(min_size=1, max_size=20).filter(lambda k: k not in params))
        args = {**args, key: draw(json_value)}
    elif kind == "wrong_type":
        name = draw(st.sampled_from(sorted(params)))
        args = {**args, name: draw(WRONG_FOR[params[name]])}
    elif kind == "deep":
        name = draw(st.sampled_from(sorted(params)))
        args = {**args, name: nested(draw(st.integers(5, 150)))}
    elif kind in ("bad_vm", "huge"):
        vm = draw(bad_vm()) if kind == "bad_vm" else "v" * draw(st.integers(256, 60_000))
        if tool == "zerto_guard_before_mutate":
            args = {**args, "arguments": {"host": draw(st.sampled_from(["", "root@", "admin@"])) + vm}}
        else:
            args = {**args, "vm": vm}
    elif kind == "bad_path":
        args = {**args, "path": draw(bad_path())}
    elif kind == "smuggled_change_id":
        args = {**args, "change_id": draw(smuggling())}
    else:  # an action of nothing but separators and control characters: nothing left to tag
        args = {**args, "action": draw(st.text(alphabet="|\x00\x1b\u202e\u200b \t\n", min_size=1, max_size=20))}
    return tool, args


def _meta() -> dict[str, Any]:
    return {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {}}


def _message(era: str, method: str, params: dict[str, Any], rpc_id: Any = 1) -> dict[str, Any]:
    if era == MODERN:
        params = {**params, "_meta": _meta()}
    return {"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": params}


def _sendable(value: str) -> bool:
    """Whether a client can put ``value`` in a header: printable ASCII, no space at either end (h11 refuses those)."""
    return bool(value) and value.isascii() and value.isprintable() and value == value.strip()


@st.composite
def hostile_body(draw: Any, era: str) -> tuple[str, bytes, dict[str, str]]:
    """(what kind, the body, extra headers)."""
    kind = draw(
        st.sampled_from(["call"] * 6 + ["junk", "not_one_message", "envelope", "unknown_method", "unknown_tool"])
    )
    headers: dict[str, str] = {}
    if kind == "call":
        tool, args = draw(refused_call())
        headers = {"Mcp-Method": "tools/call", "Mcp-Name": tool} if era == MODERN and _sendable(tool) else {}
        body: Any = _message(era, "tools/call", {"name": tool, "arguments": args}, draw(st.integers(1, 10**6)))
    elif kind == "junk":
        return kind, draw(st.binary(max_size=300)), headers
    elif kind == "not_one_message":
        body = draw(st.one_of(json_leaf, st.lists(json_value, max_size=4)))
    elif kind == "envelope":
        base = _message(era, "tools/list", {})
        member = draw(st.sampled_from(["jsonrpc", "id", "method", "params"]))
        body = {**base, member: draw(json_value.filter(lambda v: not _valid_member(member, v)))}
    elif kind == "unknown_method":
        # Every MCP method but these two has a "/" and is short.
        method = draw(
            st.text(min_size=1, max_size=300).filter(
                lambda m: m not in ("ping", "initialize") and ("/" not in m or len(m) > 40)
            )
        )
        headers = {"Mcp-Method": method} if era == MODERN and _sendable(method) else {}
        body = _message(era, method, {})
    else:
        name = draw(st.text(min_size=1, max_size=200).filter(lambda n: n not in TOOLS))
        headers = {"Mcp-Method": "tools/call", "Mcp-Name": name} if era == MODERN and _sendable(name) else {}
        body = _message(era, "tools/call", {"name": name, "arguments": {}})
    return kind, json.dumps(body).encode(), headers


def _valid_member(member: str, value: Any) -> bool:
    return {
        "jsonrpc": value == "2.0",
        "id": isinstance(value, (str, int)) and not isinstance(value, bool),
        "method": isinstance(value, str),
        "params": isinstance(value, dict),
    }[member]


# --- the run ------------------------------------------------------------------------------------------


def _answers(resp: httpx2.Response) -> Iterator[dict[str, Any]]:
    kind = resp.headers.get("content-type", "")
    if kind.startswith("application/json"):
        yield resp.json()
    elif kind.startswith("text/event-stream"):
        # Lines end at \n only: str.splitlines() would also split at U+2028 inside the JSON.
        for line in resp.text.split("\n"):
            line = line.rstrip("\r")
            if line.startswith("data:") and line[5:].strip():
                yield json.loads(line[5:])


def _refused(resp: httpx2.Response) -> bool:
    if resp.status_code in (202, 204):  # a notification (no id) acknowledged: nothing was done
        return True
    if 400 <= resp.status_code < 500:
        return True
    answers = list(_answers(resp))
    final = [a for a in answers if "result" in a or "error" in a]
    return bool(final) and all("error" in a or a["result"].get("isError") for a in final)


def _zvm_requests(sim: Any) -> Counter[str]:
    """Every request each site got, by site and call."""
    return Counter({f"{slug} {call}": n for slug in SLUGS for call, n in sim.calls(slug).items()})


@pytest.fixture
def fuzz_server(tmp_path: Any, transactional_db: None, sim: Any) -> Iterator[tuple[UvicornServer, str]]:
    register_sites(sim, {"Site A": "site-a", "Site B": "site-b"})
    install_starter_catalog()
    _, token = make_agent_token()
    env = {"MCP_RATE_LIMIT_PER_MINUTE": "100000000"}
    with run_uvicorn(tmp_path, database_url=test_database_url(), workers=1, env=env) as server:
        yield server, token


@pytest.mark.parametrize("era", [LEGACY, MODERN])
def test_hostile_messages_are_refused_without_a_5xx_a_traceback_or_a_zvm_request(
    era: str, fuzz_server: tuple[UvicornServer, str], sim: Any
) -> None:
    server, token = fuzz_server
    http = httpx2.Client(
        headers={
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": era,
        },
        timeout=30,
    )
    requests_before = _zvm_requests(sim)
    kinds: Counter[str] = Counter()
    statuses: Counter[int] = Counter()
    started = time.monotonic()

    @given(case=hostile_body(era))
    @settings(max_examples=CASES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    def refused(case: tuple[str, bytes, dict[str, str]]) -> None:
        kind, body, headers = case
        resp = http.post(server.mcp_url, content=body, headers=headers)
        kinds[kind] += 1
        statuses[resp.status_code] += 1
        assert resp.status_code < 500, (kind, body[:300], resp.status_code, resp.text[:300])
        assert _refused(resp), (kind, body[:300], resp.status_code, resp.text[:500])
        assert len(resp.content) <= MAX_ANSWER_BYTES, (kind, len(body), resp.text[:300])

    with http:
        refused()
    elapsed = time.monotonic() - started
    log = server.log.read_text(errors="replace")
    total = sum(kinds.values())
    print(
        f"\nMCP fuzz {era}: {total} refused cases in {elapsed:.1f} s; kinds {dict(kinds)}; "
        f"HTTP statuses {dict(sorted(statuses.items()))}"
    )
    assert total >= CASES * 0.95  # hypothesis may stop a few short when it has seen every small case
    assert "Traceback" not in log, log[log.index("Traceback") - 500 :][:3000]
    assert _zvm_requests(sim) == requests_before, (
        f"a refused call reached a ZVM: {_zvm_requests(sim) - requests_before}"
    )


ODD_BUT_VALID = [
    "we\u0301b01", "web\u030101", "\uff57\uff45\uff42\uff10\uff11", "\u0432\u0435\u0431\u0030\u0031", "ウェブ01", "web01\U0001f600", "ab\u05d0\u05d1", "x" * 255,
    "web 01", "WEB01", "web01.", ".web01", "web_01-a.example.com", "10.0.0.999", "::ffff:10.0.0.5", "web01%00",
]  # fmt: skip


@pytest.mark.parametrize("era", [LEGACY, MODERN])
def test_odd_but_valid_vm_names_are_asked_about_without_a_5xx(
    era: str, fuzz_server: tuple[UvicornServer, str], sim: Any
) -> None:
    server, token = fuzz_server
    headers = {
        "Authorization": f"Bearer {token}",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": era,
    }
    if era == MODERN:
        headers.update({"Mcp-Method": "tools/call", "Mcp-Name": "zerto_find_protection"})
    count = 0
    with httpx2.Client(headers=headers, timeout=60) as http:

        @given(
            vm=st.one_of(
                st.sampled_from(ODD_BUT_VALID),
                st.text(alphabet=st.characters(categories=["L", "M", "N"]), min_size=1, max_size=40),
            )
        )
        @settings(
            max_examples=max(50, CASES // 6), deadline=None, suppress_health_check=list(HealthCheck), database=None
        )
        def asked(vm: str) -> None:
            nonlocal count
            body = _message(era, "tools/call", {"name": "zerto_find_protection", "arguments": {"vm": vm}})
            resp = http.post(server.mcp_url, content=json.dumps(body).encode())
            count += 1
            assert resp.status_code == 200, (vm, resp.status_code, resp.text[:300])
            assert list(_answers(resp)), (vm, resp.text[:300])

        asked()
    print(f"\nMCP fuzz {era}: {count} odd but valid VM names asked about")
    assert "Traceback" not in server.log.read_text(errors="replace")
