"""FastMCP's proxy in front of one streamable-HTTP upstream: what a user would run instead of the gateway.

Run by bench/gateway.py in the fastmcp 4.x virtualenv ``make upstreams`` builds (var/upstreams/py2). Stateless,
so the benchmark's 2026-07-28 POSTs need no session. By default each request gets a session of its own to the
upstream, as ``create_proxy`` does with a URL; ``--keep-session`` shares one connected client's session, as
FastMCP documents for speed.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from fastmcp import Client
from fastmcp.server import create_proxy

READY = "fastmcp proxy ready on "


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--keep-session", action="store_true")
    args = parser.parse_args()
    config = {
        "mcpServers": {
            "upstream": {
                "url": args.upstream,
                "transport": "http",
                "headers": {"Authorization": f"Bearer {args.token}"},
            }
        }
    }
    asyncio.run(serve(config, args.port, keep_session=args.keep_session))


async def serve(config: dict[str, Any], port: int, *, keep_session: bool) -> None:
    if not keep_session:
        proxy = create_proxy(config, name="fastmcp-proxy")
        print(f"{READY}http://127.0.0.1:{port}/mcp", flush=True)
        await proxy.run_http_async(host="127.0.0.1", port=port, stateless_http=True, show_banner=False)
        return
    async with Client(config) as client:
        proxy = create_proxy(client, name="fastmcp-proxy")
        print(f"{READY}http://127.0.0.1:{port}/mcp", flush=True)
        await proxy.run_http_async(host="127.0.0.1", port=port, stateless_http=True, show_banner=False)


if __name__ == "__main__":
    main()
