"""``manage.py demo --gateway``: the same loop, with the agent connected only to zerto-rewind.

The guest shell (``tests/gateway/guestshell.py``, a small MCP server that edits the simulator's
guests) is the agent's "ssh": it is added as a stdio upstream that the service starts itself,
and the catalog lists its ``exec`` tool. The scripted agent calls ``guestshell__exec`` straight
away, never a zerto tool first: the gateway guards the VM on the way through and hands back the
guard in the result's ``_meta``, and the agent asks for the file back with that change id.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import CommandError

from catalog.models import MutatingTool
from catalog.services import mutating_tool_add
from rewind.audit import Actor
from rewind.gateway.links import UpstreamUnavailable
from rewind.gateway.listing import upstream_tools_refresh
from rewind.gateway.models import Upstream
from rewind.gateway.services import upstream_create, upstream_update

UPSTREAM = "guestshell"
EXEC = f"{UPSTREAM}__exec"
ACTOR = Actor.system("manage.py demo")


def guest_shell_command(sim_url: str) -> list[str]:
    ca = Path(settings.VAR_DIR) / "sim" / "ca.pem"
    if not ca.exists():
        raise CommandError(f"the simulator's CA is not at {ca}: start the stack with `make run`")
    return [sys.executable, "-m", "tests.gateway.guestshell", "--stdio", "--sim-url", sim_url, "--ca-bundle", str(ca)]


def ensure_guest_shell(sim_url: str) -> tuple[Upstream, list[str]]:
    """The guest shell as a stdio upstream, its tools listed, ``exec`` in the catalog; what was set up."""
    said: list[str] = []
    command = guest_shell_command(sim_url)
    env = {"PYTHONPATH": str(settings.BASE_DIR)}
    upstream = Upstream.objects.filter(name=UPSTREAM).first()
    if upstream is None:
        upstream = upstream_create(actor=ACTOR, name=UPSTREAM, transport="stdio", command=command, env=env)
        said.append(f"added upstream {UPSTREAM} (stdio: python -m tests.gateway.guestshell)")
    elif upstream.command != command or not upstream.enabled:
        upstream = upstream_update(actor=ACTOR, upstream=upstream, command=command, env=env, enabled=True)
    try:
        report = upstream_tools_refresh(upstream)
    except UpstreamUnavailable as exc:
        raise CommandError(f"the guest shell does not start: {exc.message}") from None
    said.append(f"{UPSTREAM} exports {', '.join(report.exported)}")
    if not MutatingTool.objects.filter(pattern=f"{UPSTREAM}/exec").exists():
        mutating_tool_add(
            actor=ACTOR,
            pattern=f"{UPSTREAM}/exec",
            vm_arg="host",
            description="the demo's guest shell: runs a command in the guest",
        )
        said.append(f"the catalog lists {UPSTREAM}/exec (VM in argument host)")
    return upstream, said


def sed_command(path: str) -> str:
    return f"sed -i 's/worker_connections 768;/worker_connections 4096/' {path}"


def guard_lines(meta: dict[str, Any]) -> list[str]:
    guard = meta.get("zerto-rewind/guard") or {}
    lines = [f"   call {meta.get('zerto-rewind/call_id')}: guarded on the way through, change {guard.get('change_id')}"]
    lines += [
        f"   {c['vpg']}: checkpoint {c['checkpoint_identifier']} ({c['status']})" for c in guard.get("checkpoints", [])
    ]
    return lines
