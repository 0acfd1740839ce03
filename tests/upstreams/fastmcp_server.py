"""The per-host admin MCP server of sdk1_server.py, on fastmcp 4.x (itself on the official SDK 2.x).

Runs in var/upstreams/py2 (``make upstreams``), over streamable HTTP at ``/mcp``::

    var/upstreams/py2/bin/python tests/upstreams/fastmcp_server.py --files DIR [--stateful | --stateless]
                                 [--port 0] [--record FILE] [--token-file FILE]

``--stateful`` (fastmcp's default) keeps sessions in memory; ``--stateless`` answers each request
alone. It prints ``fastmcp-server ready on http://127.0.0.1:PORT/mcp`` once it listens. Tools:
``read_file(host, path)`` (read-only), ``write_file(host, path, content)`` (under ``DIR/<host>/``)
and ``slow(seconds)``, which reports progress four times (hostadmin.py).
``--token-file FILE`` makes every request need ``Authorization: Bearer <FILE's content>`` (401 otherwise);
``--record FILE`` appends one JSON line per ``tools/call`` received (hostadmin.CallRecord).
"""

from __future__ import annotations

from typing import Annotated

from fastmcp import Context, FastMCP
from hostadmin import (  # this folder, first on sys.path when run as a script
    CONTENT_HELP,
    HOST_HELP,
    MCP_PATH,
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
from pydantic import Field

NAME = "fastmcp-server"


def build_server(files: HostFiles) -> FastMCP:
    server = FastMCP(NAME, instructions=SERVER_INSTRUCTIONS)

    @server.tool(annotations=READ_FILE)
    def read_file(
        host: Annotated[str, Field(description=HOST_HELP)], path: Annotated[str, Field(description=PATH_HELP)]
    ) -> str:
        """Return the content of a file on a host."""
        return files.read(host, path)

    @server.tool(annotations=WRITE_FILE)
    def write_file(
        host: Annotated[str, Field(description=HOST_HELP)],
        path: Annotated[str, Field(description=PATH_HELP)],
        content: Annotated[str, Field(description=CONTENT_HELP)],
    ) -> str:
        """Create or replace a file on a host."""
        return files.write(host, path, content)

    @server.tool(annotations=SLOW)
    async def slow(seconds: Annotated[float, Field(ge=0, le=600, description=SECONDS_HELP)], ctx: Context) -> str:
        """Wait this long, reporting progress four times, then answer "done"."""
        return await wait_reporting(seconds, ctx.report_progress)

    return server


def main() -> None:
    args = parse_args("fastmcp_server.py", __doc__.split("\n\n")[0])
    server = build_server(HostFiles(args.files))
    app = server.http_app(path=MCP_PATH, stateless_http=args.stateless)
    serve(app, args, name=NAME)


if __name__ == "__main__":
    main()
