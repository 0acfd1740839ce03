"""File recovery tools: ask for a file back (a human approves), read the outcome, see and end FLR sessions.
The agent is always the one of the verified token; nothing here can approve a recovery."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from typing import Annotated

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp_types import ToolAnnotations
from pydantic import Field, StrictStr

from recoveries.flr_sessions import flr_session_end_for_agent, flr_sessions_everywhere
from recoveries.presenters import RecoveryOut, recovery_agent_out
from recoveries.selectors import calling_agent, recovery_get_for_agent
from recoveries.services import recovery_request_create
from rewind.lib.errors import ApplicationError
from rewind.lib.rest.outputs import OutputModel
from rewind.mcp import scopes
from rewind.mcp.args import Confirmed, Flag, RecordId, Selector
from rewind.mcp.context import current_agent_id, run_db

# How long ``wait=true`` keeps the call open before answering with the status so far.
WAIT_MAX_S = 600.0
POLL_S = 1.0

Vm = Annotated[
    StrictStr,
    Field(description='The VM: its name, a host FQDN or short hostname, or the Zerto vmIdentifier, e.g. "web01"'),
]
GuestPath = Annotated[
    StrictStr,
    Field(
        description="The file's absolute path in the guest, e.g. "
        '"/etc/nginx/nginx.conf" or "C:\\\\inetpub\\\\web.config"'
    ),
]
Reason = Annotated[
    StrictStr,
    Field(
        description="Why you need the file back, shown to the person who approves, e.g. "
        '"nginx fails to start after my edit"'
    ),
]
CheckpointChoice = Annotated[
    Selector | None,
    Field(
        description="A tag this service put on a checkpoint, or a Zerto checkpoint identifier, e.g. "
        '"ai:bot | edit nginx.conf | vm=web01 | change=CHG-2291 | 2026-01-05T10:00:00Z"; omit to use '
        "change_id or the newest tagged checkpoint"
    ),
]
ChangeIdChoice = Annotated[
    Selector | None,
    Field(description='The change_id you guarded the change with, e.g. "CHG-2291": its checkpoint is used'),
]
BeforeCall = Annotated[
    Selector | None,
    Field(
        description="Undo a call made through this gateway: its call id (from the result's _meta "
        '"zerto-rewind/call_id", e.g. "gwc_3k9..."); the newest journal checkpoint before the call is used'
    ),
]
PointInTime = Annotated[
    Selector | None,
    Field(
        description='Undo everything since a time: ISO 8601 with zone, e.g. "2026-12-01T09:30:00Z"; the newest '
        "journal checkpoint before it is used"
    ),
]
RecoveryId = Annotated[
    RecordId, Field(description="The recovery request's id from zerto_recover_file: a JSON integer, e.g. 17")
]


class FlrSessionOut(OutputModel):
    site: str
    session_id: str
    status: str | None
    vm_identifier: str | None
    vpg_identifier: str | None
    checkpoint_identifier: str | None
    mount_time: datetime | None
    ours: bool = Field(description="Opened by this service (only these can be ended with zerto_end_flr_session)")
    recovery_id: int | None = None


class FlrSessionListOut(OutputModel):
    sessions: list[FlrSessionOut]
    site_errors: dict[str, str] = Field(default_factory=dict, description="Sites whose ZVM could not be asked")


class EndSessionOut(OutputModel):
    ok: bool
    session_id: str
    site: str
    warning: str | None = None


def _create(
    vm: str,
    path: str,
    reason: str,
    checkpoint: str | None,
    change_id: str | None,
    before_call: str | None = None,
    point_in_time: str | None = None,
    recursive: bool = False,
    restore: bool = False,
) -> RecoveryOut:
    recovery = recovery_request_create(
        agent=calling_agent(agent_id=current_agent_id()),
        vm=vm,
        path=path,
        reason=reason,
        checkpoint=checkpoint,
        change_id=change_id,
        before_call=before_call,
        point_in_time=point_in_time,
        recursive=recursive,
        restore=restore,
    )
    return recovery_agent_out(recovery)


def _status(recovery_id: int) -> RecoveryOut:
    return recovery_agent_out(recovery_get_for_agent(recovery_id=recovery_id, agent_id=current_agent_id()))


# Waiting comes after a run found the site unavailable, so it ranks above running: it is
# reported, and a run that starts again afterwards is not (progress never goes back).
_PROGRESS: dict[str, tuple[float, str]] = {
    "pending": (0, "waiting for a human to approve"),
    "approved": (1, "approved; queued"),
    "running": (2, "mounting the checkpoint and copying the file"),
    "waiting": (2.5, "approved; waiting for its recovery site to answer again"),
    "confirm": (2.6, "pulled; a person reads the diff and confirms the write-back"),
    "restoring": (2.8, "writing the file back into the guest and reading it back"),
}
_DONE = ("denied", "expired", "succeeded", "failed")


async def _wait(out: RecoveryOut, ctx: Context | None) -> RecoveryOut:
    deadline = time.monotonic() + WAIT_MAX_S
    reported = -1.0  # each progress notification must be higher than the last (the spec says so)
    while out.status not in _DONE and time.monotonic() < deadline:
        step, words = _PROGRESS.get(out.status, (0, out.status))
        if out.waiting_for_site is not None:
            words = out.waiting_for_site.message
        if ctx is not None and step > reported:
            await ctx.report_progress(step, 3, f"recovery #{out.id}: {words}")
            reported = step
        await asyncio.sleep(POLL_S)
        out = await run_db(_status, out.id)
    if ctx is not None and out.status in _DONE:
        await ctx.report_progress(3, 3, f"recovery #{out.id}: {out.status}")
    return out


async def zerto_recover_file(
    vm: Vm,
    path: GuestPath,
    reason: Reason,
    checkpoint: CheckpointChoice = None,
    change_id: ChangeIdChoice = None,
    before_call: BeforeCall = None,
    point_in_time: PointInTime = None,
    recursive: Annotated[
        Flag,
        Field(
            description="JSON true: `path` is a folder, and every file under it comes back (a manifest with each "
            "file's path, size, sha256 and modification time, and one zip to download), refused above the "
            "service's file-count and byte limits; false (default): one file"
        ),
    ] = False,
    restore: Annotated[
        Flag,
        Field(
            description="JSON true: once approved, the service writes the file back into the guest itself (a "
            "person sees the diff and confirms; a new guard comes first) and reads it back to verify; the result "
            'says restored: "verified". With recursive=true, each changed or new file of the folder is written '
            "and verified on its own (restore.files), the unchanged skipped. Refused when no writer tool serves "
            "the VM: ask without it for the bytes"
        ),
    ] = False,
    wait: Annotated[
        Flag,
        Field(
            description="JSON true: stay open (up to 10 minutes, with progress) until the "
            "recovery ends; false (default): answer at once and poll "
            "zerto_recovery_status"
        ),
    ] = False,
    ctx: Context | None = None,
) -> RecoveryOut:
    """Ask for one guest file back from a Zerto checkpoint. A human must approve before anything is mounted.

    `path` is the absolute guest path: Linux `/etc/nginx/nginx.conf` or Windows `C:\\inetpub\\web.config`.
    Choose the checkpoint with `change_id` (the change you guarded), or `checkpoint` (a tag this service put
    on a checkpoint, or a checkpoint identifier); without either, the newest tagged checkpoint this service
    made for the VM is used. To undo a change nobody guarded, give `before_call` (the call id a tool called
    through this gateway returned in `_meta`) or `point_in_time` (ISO 8601 with zone): the newest journal
    checkpoint strictly before it is used, and the answer says how far before. With `recursive=true`, `path` is a
    folder and everything under it comes back in one mount: `result.folder` lists each file (path, size, sha256,
    modified) and `result.url` is one zip of them. With `restore=true` the service puts the file back into the
    guest itself once a person confirmed, and `restore.restored` says whether it was verified (for a folder,
    `restore.files` gives each file's result). `reason` is shown to the approver. The answer carries the request id, its status
    and the approval URL to give a human. With `wait=true` the call stays open (up to 10 minutes, with progress
    notifications) until the recovery ends; otherwise poll zerto_recovery_status.
    """
    out = await run_db(_create, vm, path, reason, checkpoint, change_id, before_call, point_in_time, recursive, restore)
    return await _wait(out, ctx) if wait else out


async def zerto_recovery_status(id: RecoveryId) -> RecoveryOut:
    """Status of one of your recovery requests; once done, its result.

    A succeeded recovery carries sha256 and size, and the file inline (`content`, text when it is UTF-8,
    else base64 per `encoding`) when small, or a `url` to GET with your bearer token. `unmount` says whether
    the FLR mount was removed; `ok` stays true when the file arrived even if the unmount failed (see warning).
    """
    return await run_db(_status, id)


def _list_sessions(live_only: bool) -> FlrSessionListOut:
    listing = flr_sessions_everywhere(live_only=live_only)
    sessions = [
        FlrSessionOut.of(
            s, site=s.site.name, ours=s.ours is not None, recovery_id=s.ours.recovery_id if s.ours else None
        )
        for s in listing.sessions
    ]
    return FlrSessionListOut(sessions=sessions, site_errors=listing.errors)


async def zerto_list_flr_sessions(
    live_only: Annotated[
        Flag,
        Field(
            description="JSON true (default): only sessions still holding a mount; false: also those ending or ended"
        ),
    ] = True,
) -> FlrSessionListOut:
    """Every FLR session the configured ZVMs know, on every site, with the ones this service opened marked.

    `live_only` (default true) keeps the sessions still holding a mount. A site whose ZVM cannot be asked is
    named in `site_errors`.
    """
    return await run_db(_list_sessions, live_only)


def _end(session_id: str) -> EndSessionOut:
    report = flr_session_end_for_agent(agent_id=current_agent_id(), session_id=session_id)
    return EndSessionOut(ok=report.ok, session_id=report.session_id, site=report.site, warning=report.warning or None)


async def zerto_end_flr_session(
    session_id: Annotated[
        Selector,
        Field(
            description='The FLR session\'s id from zerto_list_flr_sessions (one with ours true), e.g. "a1b2c3d4-flr"'
        ),
    ],
    confirmed: Confirmed = False,
) -> EndSessionOut:
    """Unmount one FLR session that this service opened. `confirmed` must be true.

    Sessions of other operators are never ended by an agent: the error names the admin page where a
    person can end them.
    """
    if confirmed is not True:
        raise ApplicationError("ending an FLR session unmounts it for good: call again with confirmed=true")
    return await run_db(_end, session_id)


def register(server: MCPServer) -> None:
    def read_only(title: str) -> ToolAnnotations:
        return ToolAnnotations(
            title=title, read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
        )

    # Not idempotent: each call makes a new request for a person to approve.
    title = "Ask for a file back from a checkpoint (human-approved)"
    server.tool(
        name="zerto_recover_file",
        title=title,
        meta=scopes.tool_meta(scopes.RECOVER),
        annotations=ToolAnnotations(
            title=title, read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
        ),
    )(zerto_recover_file)
    title = "Status and result of a file recovery"
    server.tool(
        name="zerto_recovery_status", title=title, annotations=read_only(title), meta=scopes.tool_meta(scopes.READ)
    )(zerto_recovery_status)
    title = "List FLR sessions on every site"
    server.tool(
        name="zerto_list_flr_sessions", title=title, annotations=read_only(title), meta=scopes.tool_meta(scopes.READ)
    )(zerto_list_flr_sessions)
    # Destructive: it unmounts (a reader of that mount loses it). Idempotent: ending an ended
    # session changes nothing more.
    title = "Unmount an FLR session this service opened"
    server.tool(
        name="zerto_end_flr_session",
        title=title,
        meta=scopes.tool_meta(scopes.SESSIONS),
        annotations=ToolAnnotations(
            title=title, read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
        ),
    )(zerto_end_flr_session)
