"""A stdio upstream's relayed tools/call (``rewind.gateway.pipes``, ``relay.PipeRelay``), line by line.

Each test starts a real child process, scripted: it reads a number of requests, then writes the
lines given (``"ID0"``, ``"ID1"``: the ids of the requests it read, in order), then records every line
it reads after them until its stdin closes, or exits at once. So what the relay and the SDK each get
from the child's stdout, and what reaches its stdin, is exact. The whole session against a real SDK
server over stdio is ``test_relay``'s.
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from mcp_types import JSONRPCNotification
from mcp_types.jsonrpc import CONNECTION_CLOSED, REQUEST_TIMEOUT

from rewind.gateway.pipes import relayed_stdio
from rewind.gateway.relay import PipeRelay
from tests.gateway.scripted import run

pytestmark = pytest.mark.process  # each test starts its scripted child

CHILD = r"""
import json, sys
reads, lines, record, then = int(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3], sys.argv[4]
ids = [json.loads(sys.stdin.readline())["id"] for _ in range(reads)]
for line in lines:
    for n, rpc_id in enumerate(ids):
        line = line.replace(f'"ID{n}"', json.dumps(rpc_id))
    sys.stdout.write(line + "\n")
sys.stdout.flush()
if then == "exit":
    sys.exit(0)
with open(record, "a") as out:
    for line in sys.stdin:
        out.write(line)
        out.flush()
"""


def _child(tmp_path: Path, reads: int, lines: list[str], then: str = "wait") -> StdioServerParameters:
    record = tmp_path / "stdin-after.jsonl"
    return StdioServerParameters(
        command=sys.executable, args=["-c", CHILD, str(reads), json.dumps(lines), str(record), then]
    )


def _answer(rpc_id: str, text: str) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": rpc_id, "result": {"content": [{"type": "text", "text": text}]}})


def _params(name: str) -> dict[str, Any]:
    return {"name": name, "arguments": {}}


class _Peer:
    def __init__(self) -> None:
        self.abandoned: list[tuple[str, str]] = []

    async def deliver(self, message: Any) -> None:
        raise AssertionError("over stdio the SDK's dispatcher reads the other lines itself")

    async def abandon(self, request_id: str, reason: str) -> None:
        self.abandoned.append((request_id, reason))


def test_answers_go_to_their_calls_in_any_order_and_the_other_lines_to_the_sdk(tmp_path: Path) -> None:
    lines = [
        '{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"working"}}',
        "not json at all",
        _answer("ID1", "second"),
        '{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"ID0","progress":0.5}}',
        '{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"relay-99","progress":1}}',
        '{"jsonrpc":"2.0","id":7,"result":{}}',
        _answer("ID0", "first"),
    ]
    seen: list[float] = []

    async def note(progress: float, total: float | None, message: str | None) -> None:
        seen.append(progress)

    async def scenario() -> tuple[list[Any], list[Any]]:
        relay = PipeRelay()
        async with relayed_stdio(_child(tmp_path, 2, lines), relay) as (read_stream, _):
            sdk_got: list[Any] = []

            async def sdk_reads() -> None:
                async for item in read_stream:
                    sdk_got.append(item)

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(sdk_reads)
                results: list[Any] = [None, None]

                async def call(n: int, name: str, on_progress: Any) -> None:
                    results[n] = await relay.tool_call(_params(name), {"timeout": 10, "on_progress": on_progress})

                async with anyio.create_task_group() as calls:
                    calls.start_soon(call, 0, "first", note)
                    await anyio.sleep(0.2)  # the first is written first: it is ID0
                    calls.start_soon(call, 1, "second", None)
                await anyio.sleep(0.2)  # the SDK's reader takes what was left for it
                tasks.cancel_scope.cancel()
        return results, sdk_got

    results, sdk_got = run(scenario())
    assert [r["content"][0]["text"] for r in results] == ["first", "second"]
    assert seen == [0.5]
    # The log line, the line that is not JSON (as the SDK's transport reads it: an error value),
    # progress for a call not waiting here, and the answer to the SDK's own request 7.
    assert isinstance(sdk_got[0], SessionMessage)
    assert isinstance(sdk_got[0].message, JSONRPCNotification)
    assert sdk_got[0].message.method == "notifications/message"
    assert isinstance(sdk_got[1], Exception)
    assert isinstance(sdk_got[2], SessionMessage)
    assert sdk_got[2].message.model_dump()["params"]["progressToken"] == "relay-99"
    assert isinstance(sdk_got[3], SessionMessage)
    assert sdk_got[3].message.model_dump()["id"] == 7
    assert len(sdk_got) == 4


def test_a_child_that_exits_fails_the_call_waiting_and_the_next_one_at_once(tmp_path: Path) -> None:
    async def scenario() -> tuple[MCPError, MCPError]:
        relay = PipeRelay()
        async with relayed_stdio(_child(tmp_path, 1, [], then="exit"), relay) as (read_stream, _):
            with pytest.raises(MCPError) as waiting:
                await relay.tool_call(_params("slow"), {"timeout": 10})
            with pytest.raises(MCPError) as next_one:
                await relay.tool_call(_params("again"), {"timeout": 10})
            with pytest.raises(anyio.EndOfStream):
                await read_stream.receive()  # and the SDK's session sees its pipe gone
        return waiting.value, next_one.value

    waiting, next_one = run(scenario())
    assert (waiting.error.code, waiting.error.message) == (CONNECTION_CLOSED, "Connection closed")
    assert next_one.error.code == CONNECTION_CLOSED


def test_a_call_that_times_out_is_given_up_and_the_sdk_told(tmp_path: Path) -> None:
    peer = _Peer()

    async def scenario() -> tuple[MCPError, str]:
        relay = PipeRelay()
        async with relayed_stdio(_child(tmp_path, 1, []), relay):
            with pytest.raises(MCPError) as timed_out:
                await relay.tool_call(_params("never"), {"timeout": 0.5}, peer)
            late = _answer(peer.abandoned[0][0], "late")
            assert not relay.take(late)  # an answer after the call was given up: not the relay's any more
        return timed_out.value, late

    timed_out, _ = run(scenario())
    assert timed_out.error.code == REQUEST_TIMEOUT
    assert peer.abandoned == [("relay-1", "timed out after 0.5s")]


def test_the_call_written_is_the_sdks_message_with_a_progress_token_of_its_own(tmp_path: Path) -> None:
    """What the child reads: one line, the session's params kept, ``_meta`` with the progress token."""
    echo = r"""
import json, sys
request = json.loads(sys.stdin.readline())
answer = {"jsonrpc": "2.0", "id": request["id"], "result": {"content": [{"type": "text", "text": json.dumps(request)}]}}
sys.stdout.write(json.dumps(answer) + "\n")
sys.stdout.flush()
sys.stdin.read()
"""

    async def note(progress: float, total: float | None, message: str | None) -> None:
        return None

    async def scenario() -> dict[str, Any]:
        relay = PipeRelay()
        params = {"name": "échange", "arguments": {"x": 1}, "_meta": {"io.modelcontextprotocol/protocolVersion": "v"}}
        async with relayed_stdio(StdioServerParameters(command=sys.executable, args=["-c", echo]), relay):
            result = await relay.tool_call(params, {"timeout": 10, "on_progress": note})
        return json.loads(result["content"][0]["text"])

    sent = run(scenario())
    assert sent["id"] == "relay-1"
    assert sent["method"] == "tools/call"
    assert sent["params"]["name"] == "échange"
    assert sent["params"]["arguments"] == {"x": 1}
    assert sent["params"]["_meta"]["progressToken"] == "relay-1"
    assert sent["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] == "v"


def test_a_child_is_started_where_sys_stderr_has_no_file_descriptor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a Celery worker ``sys.stderr`` is a logging proxy without a file descriptor: the child's
    stderr is this process's own, as the SDK's stdio client gives it, and the call goes through."""
    monkeypatch.setattr(sys, "stderr", io.StringIO())  # fileno() raises, as the worker's proxy has none

    async def scenario() -> dict[str, Any]:
        relay = PipeRelay()
        async with relayed_stdio(_child(tmp_path, 1, [_answer("ID0", "ok")]), relay):
            return await relay.tool_call(_params("any"), {"timeout": 10})

    assert run(scenario())["content"][0]["text"] == "ok"
