"""Command line: ``python -m zvmsim [options]``; prints one ready line once it listens."""
from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from pathlib import Path

import uvicorn

from .app import create_app
from .config import SimConfig
from .tls import ensure_certs


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m zvmsim",
        description="ZVM 10.x REST simulator: several sites (site-a, site-b, site-c, site-aws), each "
                    "at https://HOST:PORT/<slug> with a Keycloak token endpoint and /v1; control API "
                    "at /_sim/. Credentials: admin/zerto (client_id zerto-client), or client "
                    "credentials rewind/rewind-secret.")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8443,
                   help="port to listen on (default 8443; 0 picks a free one, shown in the ready line)")
    p.add_argument("--http", action="store_true", help="serve plain HTTP instead of HTTPS")
    p.add_argument("--vms", type=int, default=0,
                   help="filler VMs vm-00001... added to the demo inventory (default 0)")
    p.add_argument("--seed", type=int, default=42, help="seed of every identifier and filler VM (default 42)")
    p.add_argument("--token-ttl", type=float, default=300.0,
                   help="access token lifetime in seconds, returned as expires_in (default 300)")
    p.add_argument("--cert-dir", type=Path, default=None,
                   help="where ca.pem, cert.pem and key.pem live; made when missing "
                        "(default: a new temporary directory)")
    p.add_argument("--task-seconds", type=float, default=0.3,
                   help="how long a checkpoint insert task stays InProgress (default 0.3)")
    p.add_argument("--mount-seconds", type=float, default=0.3,
                   help="how long an FLR mount stays MountInProgress (default 0.3)")
    p.add_argument("--unmount-seconds", type=float, default=0.3,
                   help="how long an FLR session stays UnmountInProgress (default 0.3)")
    p.add_argument("--access-log", action="store_true", help="log every request to stderr")
    return p.parse_args(argv)


class _Server(uvicorn.Server):
    """Prints the ready line (with the real port when --port 0) once the socket listens."""

    scheme = "https"

    async def startup(self, sockets: list | None = None) -> None:  # type: ignore[type-arg]
        await super().startup(sockets)
        if self.started:
            port = self.servers[0].sockets[0].getsockname()[1] if self.servers else self.config.port
            print(f"zvmsim ready on {self.scheme}://{self.config.host}:{port}", flush=True)

    async def shutdown(self, sockets: list | None = None) -> None:  # type: ignore[type-arg]
        # Idle keep-alive TLS connections would wait for the client's close_notify, which an
        # idle client never sends: drop them so a stop takes milliseconds, not the timeout.
        for conn in list(self.server_state.connections):
            transport = getattr(conn, "transport", None)
            cycle = getattr(conn, "cycle", None)
            if transport is not None and (cycle is None or getattr(cycle, "response_complete", True)):
                transport.abort()
        await super().shutdown(sockets)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s %(levelname)s %(message)s")
    config = SimConfig(seed=args.seed, vms=args.vms, token_ttl=args.token_ttl,
                       task_seconds=args.task_seconds, mount_seconds=args.mount_seconds,
                       unmount_seconds=args.unmount_seconds)
    certfile: str | None = None
    keyfile: str | None = None
    ca_bundle = None
    if not args.http:
        cert_dir = args.cert_dir or Path(tempfile.mkdtemp(prefix="zvmsim-certs-"))
        files = ensure_certs(cert_dir, [args.host])
        certfile, keyfile = str(files.cert), str(files.key)
        ca_bundle = str(files.ca)
        print(f"zvmsim CA bundle: {ca_bundle}", flush=True)
    app = create_app(config, ca_bundle)
    level = "info" if args.access_log else "warning"
    server = _Server(uvicorn.Config(app, host=args.host, port=args.port, log_level=level,
                                    access_log=args.access_log, lifespan="off",
                                    timeout_graceful_shutdown=2, ssl_certfile=certfile,
                                    ssl_keyfile=keyfile))
    server.scheme = "http" if args.http else "https"
    server.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
