"""Which upstream tools write a file into a guest and read it back: set, remove, and find them for a VM. Every
change is audited; a setting is checked against the upstream's listed tools once it has listed them (a call that
does not fit is reported when it is made).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from typing import Any

from django.db import transaction

from recoveries.restore.models import GuestFileTools
from rewind.audit import Actor, audit_record
from rewind.audit.actions import RecoveryAction
from rewind.gateway.models import Upstream, UpstreamTool
from rewind.lib.errors import ApplicationError, NotFoundError


def _tool_arguments(upstream: Upstream, tool: str) -> list[str] | None:
    """The argument names of a listed tool; None when the upstream has not listed it (or anything) yet."""
    row = UpstreamTool.objects.filter(upstream=upstream, name=tool).exclude(state=UpstreamTool.State.GONE).first()
    if row is None:
        return None
    properties = (row.input_schema or {}).get("properties")
    return [str(k) for k in properties] if isinstance(properties, Mapping) else []


def _check_tool(row: GuestFileTools, tool: str, role: str, needs: list[str]) -> None:
    upstream = row.upstream
    arguments = _tool_arguments(upstream, tool)
    if arguments is None:
        if upstream.tools_listed_at is not None:
            raise ApplicationError(f"upstream {upstream.name} lists no tool {tool!r} (the {role})")
        return
    missing = [name for name in needs if name and name not in arguments]
    if missing:
        raise ApplicationError(
            f"the {role} {upstream.name}/{tool} takes no argument {', '.join(missing)} "
            f"(it takes {', '.join(arguments) or 'none'})"
        )


def _validate(row: GuestFileTools) -> None:
    if row.os not in GuestFileTools.Os.values:
        raise ApplicationError("os must be linux or windows")
    if row.content_encoding not in GuestFileTools.Encoding.values:
        raise ApplicationError("content_encoding must be utf-8 or base64")
    row.vm_pattern = (row.vm_pattern or "").strip() or "*"
    row.writer_tool, row.reader_tool = row.writer_tool.strip(), row.reader_tool.strip()
    if not row.writer_tool:
        raise ApplicationError("name the tool that writes a file into the guest (writer_tool)")
    for name in ("vm_arg", "path_arg", "content_arg", "reader_vm_arg", "reader_path_arg", "encoding_arg"):
        setattr(row, name, str(getattr(row, name) or "").strip())
    for name in ("path_arg", "content_arg"):
        if not getattr(row, name):
            raise ApplicationError(f"name the argument that takes the {name.removesuffix('_arg')} ({name})")
    _check_host(row)
    extra = [row.encoding_arg] if row.encoding_arg else []
    _check_tool(row, row.writer_tool, "writer", [row.vm_arg, row.path_arg, row.content_arg, *extra])
    if row.reader_tool:
        _check_tool(row, row.reader_tool, "reader", [row.reader_vm, row.reader_path, *extra])


def _check_host(row: GuestFileTools) -> None:
    """A VM argument names the VM; an upstream that serves one machine takes none, and serves only that VM."""
    host = row.upstream.host_vm
    if not host:
        if not row.vm_arg:
            raise ApplicationError(
                "name the writer's argument that takes the VM (vm_arg), or set the upstream's host VM "
                "if it serves one machine"
            )
        return
    if row.vm_arg or row.reader_vm_arg:
        raise ApplicationError(
            f"upstream {row.upstream.name} serves one machine ({host}): its tools take no VM argument, "
            "so leave vm_arg and reader_vm_arg empty"
        )
    if row.vm_pattern == "*":
        row.vm_pattern = host
    if not fnmatch.fnmatchcase(host.lower(), row.vm_pattern.lower()):
        raise ApplicationError(
            f"upstream {row.upstream.name} serves only {host}, which vm_pattern {row.vm_pattern!r} leaves out"
        )


def guest_file_tools_check(*, upstream: Upstream, os: str, **fields: Any) -> None:
    """What ``guest_file_tools_set`` would refuse, checked without saving (a form's validation)."""
    row = GuestFileTools(upstream=upstream, os=os)
    for key, value in fields.items():
        if key in GuestFileTools.EDITABLE:
            setattr(row, key, value)
    _validate(row)


@transaction.atomic
def guest_file_tools_set(*, actor: Actor, upstream: Upstream, os: str, **fields: Any) -> GuestFileTools:
    """Create or change the tools of ``upstream`` for ``os`` and ``vm_pattern`` (default ``*``);
    ``ApplicationError``, nothing changed, when a field is unknown or does not fit the upstream's listed tools."""
    unknown = set(fields) - set(GuestFileTools.EDITABLE)
    if unknown:
        raise ApplicationError(f"unknown fields: {', '.join(sorted(unknown))}")
    pattern = str(fields.get("vm_pattern") or "*").strip() or "*"
    row = (
        GuestFileTools.objects.select_for_update()
        .filter(upstream=upstream, os=os, vm_pattern=pattern)
        .select_related("upstream")
        .first()
    )
    before = row.audit_data() if row is not None else None
    if row is None:
        row = GuestFileTools(upstream=upstream, os=os)
    for key, value in fields.items():
        setattr(row, key, value)
    _validate(row)
    row.save()
    audit_record(
        actor=actor,
        action=RecoveryAction.RESTORE_TOOLS_SET,
        target=row,
        data={"before": before, "after": row.audit_data()},
    )
    return row


@transaction.atomic
def guest_file_tools_remove(*, actor: Actor, tools_id: int) -> None:
    row = GuestFileTools.objects.select_related("upstream").filter(pk=tools_id).first()
    if row is None:
        raise NotFoundError(f"there are no guest file tools #{tools_id}")
    audit_record(actor=actor, action=RecoveryAction.RESTORE_TOOLS_REMOVED, target=row, data=row.audit_data())
    row.delete()


def guest_file_tools_for(*, vm_name: str, os: str) -> GuestFileTools | None:
    """The enabled tools serving this VM on this platform: the most specific pattern that matches it."""
    rows = GuestFileTools.objects.filter(os=os, enabled=True, upstream__enabled=True).select_related("upstream")
    matching = [r for r in rows if fnmatch.fnmatchcase(vm_name.lower(), r.vm_pattern.lower())]
    matching.sort(key=lambda r: (-len(r.vm_pattern.replace("*", "")), r.upstream.name))
    return matching[0] if matching else None


def restore_refusal(*, vm_name: str, os: str, any_vm: bool = False) -> str | None:
    """Why a restore in place of a file of this VM cannot be asked for; None when it can. ``any_vm``: only whether
    some tools serve the platform at all (asked before the VM is resolved)."""
    if any_vm:
        served = GuestFileTools.objects.filter(os=os, enabled=True, upstream__enabled=True).exists()
    else:
        served = guest_file_tools_for(vm_name=vm_name, os=os) is not None
    if served:
        return None
    return (
        f"no tool is configured to write a file into {vm_name} ({os}), so it cannot be restored in place: "
        f"an operator names the writer and reader tools of a gateway upstream for {os} VMs (admin: "
        "Guest file tools, or the REST API /api/recoveries/guest-file-tools/); ask again without restore "
        "to get the bytes alone"
    )
