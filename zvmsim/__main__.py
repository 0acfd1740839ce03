"""Command line: ``python -m zvmsim [options]``; prints one ready line once it listens."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
import tempfile
from pathlib import Path
from typing import Any

import uvicorn

from .app import create_app
from .config import SimConfig
from .journal import DEFAULT_AUTO_CHECKPOINT_S, DEFAULT_HISTORY_S, MIN_AUTO_CHECKPOINT_S
from .tls import ensure_certs
from .variants import CHOICES, PRESETS, VariantError, Variants, preset, validate


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m zvmsim",
        description="ZVM 10.x REST simulator: several sites (site-a, site-b, site-c, site-aws), each "
        "at https://HOST:PORT/<slug> with a Keycloak token endpoint and /v1; control API "
        "at /_sim/. Credentials: admin/zerto (client_id zerto-client), or client "
        "credentials rewind/rewind-secret.",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument(
        "--port",
        type=int,
        default=8443,
        help="port to listen on (default 8443; 0 picks a free one, shown in the ready line)",
    )
    p.add_argument("--http", action="store_true", help="serve plain HTTP instead of HTTPS")
    p.add_argument("--vms", type=int, default=0, help="filler VMs vm-00001... added to the demo inventory (default 0)")
    p.add_argument("--seed", type=int, default=42, help="seed of every identifier and filler VM (default 42)")
    p.add_argument(
        "--token-ttl",
        type=float,
        default=None,
        help="access token lifetime in seconds, returned as expires_in (default 300; same as --variant token_ttl_s=N)",
    )
    p.add_argument(
        "--cert-dir",
        type=Path,
        default=None,
        help="where ca.pem, cert.pem and key.pem live; made when missing (default: a new temporary directory)",
    )
    p.add_argument(
        "--task-seconds",
        type=float,
        default=0.3,
        help="how long a checkpoint insert task stays InProgress (default 0.3)",
    )
    p.add_argument(
        "--mount-seconds", type=float, default=0.3, help="how long an FLR mount stays MountInProgress (default 0.3)"
    )
    p.add_argument(
        "--unmount-seconds",
        type=float,
        default=0.3,
        help="how long an FLR session stays UnmountInProgress (default 0.3)",
    )
    p.add_argument(
        "--journal-history-minutes",
        type=float,
        default=DEFAULT_HISTORY_S / 60,
        help="journal history of every VPG: older checkpoints leave the journal (default 1440, one day; "
        "per VPG at run time with POST /_sim/vpgs/{vpg}/journal)",
    )
    p.add_argument(
        "--auto-checkpoint-s",
        type=float,
        default=DEFAULT_AUTO_CHECKPOINT_S,
        help=f"an automatic (untagged) journal checkpoint in every VPG this often, in seconds; 0 for none "
        f"(default {DEFAULT_AUTO_CHECKPOINT_S:g}; per VPG at run time with POST /_sim/vpgs/{{vpg}}/journal, "
        "for all with POST /_sim/journals)",
    )
    p.add_argument("--access-log", action="store_true", help="log every request to stderr")
    v = p.add_argument_group(
        "variants",
        "behaviours the ZVM API leaves undocumented, for every site (change them at run time, "
        "per site, with POST /_sim/variants)",
    )
    v.add_argument(
        "--preset",
        choices=list(PRESETS),
        default="default",
        help="a named set of variants (default: default); --variant options apply on top",
    )
    v.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        type=_variant_arg,
        help=f"set one variant; repeatable. Names: {', '.join(VARIANT_FIELDS)}. Choices: "
        + "; ".join(f"{k} {'|'.join(str(c) for c in vs)}" for k, vs in CHOICES.items()),
    )
    v.add_argument(
        "--clock-offset",
        type=float,
        default=None,
        metavar="SECONDS",
        help="this ZVM's clock minus true time, e.g. -300 for 5 minutes behind "
        "(same as --variant clock_offset_s=SECONDS)",
    )
    return p.parse_args(argv)


VARIANT_FIELDS = [f.name for f in dataclasses.fields(Variants)]


def _variant_arg(text: str) -> tuple[str, Any]:
    name, sep, raw = text.partition("=")
    if not sep or name not in VARIANT_FIELDS:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE with NAME one of {', '.join(VARIANT_FIELDS)}")
    value: Any = raw
    if raw.lower() in ("null", "none", ""):
        value = None
    else:
        try:
            value = json.loads(raw)  # numbers; strings stay strings
        except ValueError:
            value = raw
    try:
        validate({name: value})
    except VariantError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
    return name, value


def variants_from(args: argparse.Namespace) -> Variants:
    changes: dict[str, Any] = preset(args.preset)
    changes.update(dict(args.variant))
    if args.token_ttl is not None:
        changes["token_ttl_s"] = args.token_ttl
    if args.clock_offset is not None:
        changes["clock_offset_s"] = args.clock_offset
    try:
        return Variants().changed(changes)
    except VariantError as exc:
        raise SystemExit(f"zvmsim: {exc}") from exc


class _Server(uvicorn.Server):
    """Prints the ready line (with the real port when --port 0) once the socket listens."""

    scheme = "https"

    async def startup(self, sockets: list | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            port = self.servers[0].sockets[0].getsockname()[1] if self.servers else self.config.port
            print(f"zvmsim ready on {self.scheme}://{self.config.host}:{port}", flush=True)

    async def shutdown(self, sockets: list | None = None) -> None:
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
    config = SimConfig(
        seed=args.seed,
        vms=args.vms,
        variants=variants_from(args),
        task_seconds=args.task_seconds,
        mount_seconds=args.mount_seconds,
        unmount_seconds=args.unmount_seconds,
        journal_history_s=args.journal_history_minutes * 60,
        auto_checkpoint_s=args.auto_checkpoint_s,
    )
    if config.auto_checkpoint_s != 0 and not config.auto_checkpoint_s >= MIN_AUTO_CHECKPOINT_S:
        raise SystemExit(f"zvmsim: --auto-checkpoint-s must be 0 (none) or at least {MIN_AUTO_CHECKPOINT_S:g}")
    if config.journal_history_s <= 0:
        raise SystemExit("zvmsim: --journal-history-minutes must be above 0")
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
    server = _Server(
        uvicorn.Config(
            app,
            host=args.host,
            port=args.port,
            log_level=level,
            access_log=args.access_log,
            lifespan="off",
            timeout_graceful_shutdown=2,
            ssl_certfile=certfile,
            # The app sets Date itself, from each site's own clock.
            ssl_keyfile=keyfile,
            date_header=False,
        )
    )
    server.scheme = "http" if args.http else "https"
    server.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
