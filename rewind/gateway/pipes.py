"""A stdio upstream's child process for the SDK's client, whose stdout is read here so that a
relayed ``tools/call`` (``rewind.gateway.relay.PipeRelay``) gets its answer without the SDK's layers.

Why: over stdio, the SDK's client spends most of a forwarded call's CPU in its own layers (each
message parsed into pydantic models, handed through two memory streams and its dispatcher's
waiter), against a few tenths of a millisecond for writing one line and reading one
(``bench/relay.py`` measures the two side by side). One reader owns a child's stdout, so relaying
there takes a transport of our own in place of ``mcp.client.stdio.stdio_client``.

``relayed_stdio`` is that transport, the SDK's own in every other respect: the child is started
and stopped by the SDK's functions (the SDK's safe environment with the upstream's own over it, a
process group of its own; on leaving, stdin closed, a grace period, then the whole tree killed),
the SDK's messages are written one line each, and every line that does not answer or report on a
relayed call is parsed and handed to the SDK's dispatcher as its transport does: the answers to the
session's own requests, a ping or an elicitation the server asks, a log line, a line that is not
JSON (the SDK's session sees the parse error).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TextIO

import anyio
import anyio.lowlevel
from anyio.streams.text import TextReceiveStream
from mcp.client._transport import TransportStreams
from mcp.client.stdio import (
    StdioServerParameters,
    _create_platform_compatible_process,
    _drain_stdout,
    _parse_line,
    _stop_server_process,
    get_default_environment,
)
from mcp.shared.message import SessionMessage

from rewind.gateway.relay import PipeRelay

logger = logging.getLogger(__name__)

WRITER_FLUSH_S = 0.5  # the SDK's own bound on flushing what its session handed over before stdin closes
# Where the child's stderr goes: this process's own stderr as it started, as the SDK's stdio client
# sends it (its default, read when it is imported). Not ``sys.stderr`` now: a Celery worker has
# replaced it with a logging proxy that has no file descriptor to give a child.
CHILD_STDERR: TextIO = sys.__stderr__ if sys.__stderr__ is not None else sys.stderr


@asynccontextmanager
async def relayed_stdio(server: StdioServerParameters, relay: PipeRelay) -> AsyncIterator[TransportStreams]:
    """The child's streams for the SDK's ``Client``, its relayed calls' answers going to ``relay``."""
    process = await _create_platform_compatible_process(
        command=server.command,
        args=server.args,
        env=get_default_environment() | (server.env or {}),
        errlog=CHILD_STDERR,
        cwd=server.cwd,
    )
    # No awaits until the task group is entered, or a cancellation there would leak the child.
    to_sdk, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, from_sdk = anyio.create_memory_object_stream[SessionMessage](0)
    assert process.stdin is not None, "started with pipes"
    assert process.stdout is not None, "started with pipes"
    stdin, stdout = process.stdin, process.stdout
    relay.attach(stdin, server.encoding, server.encoding_error_handler)
    shutting_down = False
    writer_done = anyio.Event()

    async def read() -> None:
        lines = TextReceiveStream(stdout, encoding=server.encoding, errors=server.encoding_error_handler)
        try:
            async with to_sdk:
                try:
                    buffer = ""
                    async for chunk in lines:
                        *complete, buffer = (buffer + chunk).split("\n")
                        for line in complete:
                            if relay.take(line):
                                continue
                            try:
                                await to_sdk.send(_parse_line(line))
                            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                                return  # the session is gone; only the drain below remains
                finally:
                    relay.close()
                    await _drain_stdout(process)
        except anyio.ClosedResourceError:
            pass  # our own shutdown closed stdout under the read
        except (anyio.BrokenResourceError, ConnectionError):
            if not shutting_down:
                logger.exception("reading a stdio upstream's stdout failed mid-session")

    async def write() -> None:
        try:
            async with from_sdk:
                async for session_message in from_sdk:
                    text = session_message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await stdin.send((text + "\n").encode(server.encoding, server.encoding_error_handler))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            # The child may still run: end the SDK's read stream, so its session sees the pipe gone.
            await to_sdk.aclose()
        finally:
            writer_done.set()

    async def shutdown() -> None:
        """As the SDK's stdio client winds down: stop the traffic, flush, stop the child, release."""
        read_stream.close()  # the reader goes on to drain: a child blocked on a full stdout cannot read stdin
        write_stream.close()
        with anyio.move_on_after(WRITER_FLUSH_S):
            await writer_done.wait()
        await _stop_server_process(process)
        for stream in (read_stream, write_stream, to_sdk, from_sdk):
            await stream.aclose()
        await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(read)
        tasks.start_soon(write)
        try:
            yield read_stream, write_stream
        finally:
            shutting_down = True
            with anyio.CancelScope(shield=True):  # every wait inside is bounded; the child must not leak
                relay.close()
                await shutdown()
            tasks.cancel_scope.cancel()
