"""``manage.py demo --gateway``: the same loop, with the agent connected only to zerto-rewind.

The guest shell (``tests/gateway/guestshell.py``) is the agent's "ssh", a stdio upstream whose ``exec`` the
catalog lists. The agent calls it straight away, never a zerto tool first: the gateway guards the VM on the way
and hands the guard back in the result's ``_meta``, and the agent asks for the file back with that change id and
``restore: true``, the guest shell's ``write_file`` and ``read_file`` writing it back and reading it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import CommandError

from catalog.models import MutatingTool
from catalog.services import mutating_tool_add
from recoveries.models import RecoveryRequest
from recoveries.restore.guest_tools import guest_file_tools_set
from recoveries.restore.models import GuestFileTools
from recoveries.restore.services import diff_token, recovery_restore_confirm, restore_diff
from rewind.audit import Actor
from rewind.gateway.links import UpstreamUnavailable
from rewind.gateway.listing import upstream_tools_refresh
from rewind.gateway.models import Upstream
from rewind.gateway.services import upstream_create, upstream_tools_approve_listed, upstream_update
from rewind.lib.errors import ApplicationError

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
    # The demo added the guest shell itself, so it approves the definitions it listed, as an admin would.
    approved = upstream_tools_approve_listed(actor=ACTOR, upstream=upstream)
    if approved:
        said.append(f"approved the definitions of {', '.join(approved)}")
    if not MutatingTool.objects.filter(pattern=f"{UPSTREAM}/exec").exists():
        mutating_tool_add(
            actor=ACTOR,
            pattern=f"{UPSTREAM}/exec",
            vm_arg="host",
            description="the demo's guest shell: runs a command in the guest",
        )
        said.append(f"the catalog lists {UPSTREAM}/exec (VM in argument host)")
    said += ensure_guest_file_tools(upstream)
    return upstream, said


def ensure_guest_file_tools(upstream: Upstream) -> list[str]:
    """The guest shell's write_file and read_file as the writer and reader of Linux guests (base64)."""
    wanted = {
        "writer_tool": "write_file",
        "reader_tool": "read_file",
        "vm_arg": "host",
        "path_arg": "path",
        "content_arg": "content",
        "content_encoding": GuestFileTools.Encoding.BASE64,
        "encoding_arg": "encoding",
        "enabled": True,
    }
    row = GuestFileTools.objects.filter(upstream=upstream, os="linux", vm_pattern="*").first()
    if row is not None and all(getattr(row, k) == v for k, v in wanted.items()):
        return []
    guest_file_tools_set(actor=ACTOR, upstream=upstream, os="linux", **wanted)
    return [f"{UPSTREAM}/write_file and read_file write and read files in Linux guests (restore in place)"]


def diff_lines(recovery_id: int) -> list[str]:
    recovery = RecoveryRequest.objects.get(pk=recovery_id)
    diff = restore_diff(recovery)
    if diff is None:
        return ["   (no diff)"]
    lines = [
        f"   in the guest now: {diff.current_size} bytes, sha256 {diff.current_sha256 or '-'}",
        f"   at the checkpoint: {diff.recovered_size} bytes, sha256 {diff.recovered_sha256}",
    ]
    return lines + [line.text for line in diff.lines]


def write_back_confirm(recovery_id: int, user: Any) -> None:
    """The page's second click, made through the same service, with the diff that was shown."""
    recovery = RecoveryRequest.objects.get(pk=recovery_id)
    try:
        recovery_restore_confirm(recovery_id=recovery_id, user=user, seen=diff_token(recovery))
    except ApplicationError as exc:
        raise CommandError(f"the write-back could not be confirmed: {exc.message}") from None


def sed_command(path: str) -> str:
    return f"sed -i 's/worker_connections 768;/worker_connections 4096/' {path}"


def guard_lines(meta: dict[str, Any]) -> list[str]:
    guard = meta.get("zerto-rewind/guard") or {}
    lines = [f"   call {meta.get('zerto-rewind/call_id')}: guarded on the way through, change {guard.get('change_id')}"]
    lines += [
        f"   {c['vpg']}: checkpoint {c['checkpoint_identifier']} ({c['status']})" for c in guard.get("checkpoints", [])
    ]
    return lines
