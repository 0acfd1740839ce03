"""A per-host admin MCP server on the official Python SDK 1.x (FastMCP), the kind most people run today.

Runs in var/upstreams/py1 (``make upstreams``), over streamable HTTP at ``/mcp``::

    var/upstreams/py1/bin/python tests/upstreams/sdk1_server.py --files DIR [--stateful | --stateless]
                                 [--port 0] [--record FILE] [--token-file FILE]

``--stateful`` (the SDK's default) keeps sessions in memory, named by ``Mcp-Session-Id``: a
restart forgets them. ``--stateless`` is the SDK's ``stateless_http=True``. It prints
``sdk1-server ready on http://127.0.0.1:PORT/mcp`` once it listens. Tools: ``read_file(host, path)``
(read-only), ``write_file(host, path, content)`` (under ``DIR/<host>/``) and ``slow(seconds)``,
which reports progress four times (hostadmin.py).
``--token-file FILE`` makes every request need ``Authorization: Bearer <FILE's content>`` (401 otherwise);
``--record FILE`` appends one JSON line per ``tools/call`` received (hostadmin.CallRecord).
"""

from __future__ import annotations

from typing import Annotated

from hostadmin import (  # this folder, first on sys.path when run as a script
    CONTENT_HELP,
    HOST_HELP,
    PATH_HELP,
    READ_FILE,
    SECONDS_HELP,
    SERVER_INSTRUCTIONS,
    SLOW,
    WRITE_FILE,
    HostFiles,
    parse_args,
    serve,
    wait_reporting,
)

# This file runs on the SDK 1.x; mypy reads it against the main venv's 2.x, which has no FastMCP.
from mcp.server.fastmcp import Context, FastMCP  # type: ignore[attr-defined]
from mcp.types import ToolAnnotations
from pydantic import Field

NAME = "sdk1-server"


def build_server(files: HostFiles, *, stateless: bool, host: str) -> FastMCP:
    server = FastMCP(NAME, instructions=SERVER_INSTRUCTIONS, stateless_http=stateless, host=host)

    @server.tool(annotations=ToolAnnotations(**READ_FILE))
    def read_file(
        host: Annotated[str, Field(description=HOST_HELP)], path: Annotated[str, Field(description=PATH_HELP)]
    ) -> str:
        """Return the content of a file on a host."""
        return files.read(host, path)

    @server.tool(annotations=ToolAnnotations(**WRITE_FILE))
    def write_file(
        host: Annotated[str, Field(description=HOST_HELP)],
        path: Annotated[str, Field(description=PATH_HELP)],
        content: Annotated[str, Field(description=CONTENT_HELP)],
    ) -> str:
        """Create or replace a file on a host."""
        return files.write(host, path, content)

    @server.tool(annotations=ToolAnnotations(**SLOW))
    async def slow(seconds: Annotated[float, Field(ge=0, le=600, description=SECONDS_HELP)], ctx: Context) -> str:
        """Wait this long, reporting progress four times, then answer "done"."""
        return await wait_reporting(seconds, ctx.report_progress)

    return server


def main() -> None:
    args = parse_args("sdk1_server.py", __doc__.split("\n\n")[0])
    server = build_server(HostFiles(args.files), stateless=args.stateless, host=args.host)
    serve(server.streamable_http_app(), args, name=NAME)


if __name__ == "__main__":
    main()
