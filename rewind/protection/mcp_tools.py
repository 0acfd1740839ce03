"""``zerto_find_protection``: which VM a name means and which VPGs protect it."""

from __future__ import annotations

from typing import Annotated

import pydantic_core
from django.db import DatabaseError
from mcp.server import MCPServer
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field, StrictStr

from rewind.agents.limits import CLAIM as LIMIT_CLAIM
from rewind.agents.limits import VmLimit
from rewind.mcp import scopes
from rewind.mcp.context import SharedRead, current_agent_name, current_claims, run_db
from rewind.protection import (
    Protection,
    SiteRef,
    VpgProtection,
    find_protection,
    find_protection_cached,
    sites_fingerprint,
)
from rewind.protection.within_limit import check_within


class SiteOut(BaseModel):
    identifier: str | None
    name: str | None
    type: str | None = Field(description="SiteType as the ZVM reports it, e.g. VCenter, AWS, Azure")
    configured_here: bool = Field(description="Whether this service has the ZVM of that site configured")


class VpgOut(BaseModel):
    identifier: str
    name: str | None
    protected_site: SiteOut
    recovery_site: SiteOut
    status: int | None
    status_name: str | None
    sub_status: int | None
    sub_status_name: str | None
    flr_enabled: bool = Field(description="Whether File Level Recovery is enabled for this VM in this VPG")
    can_insert_checkpoint: bool
    cannot_insert_reason: str | None = Field(description="Why a tagged checkpoint cannot be inserted, if it cannot")


class ProtectionOut(BaseModel):
    vm_identifier: str
    vm_name: str | None
    vpgs: list[VpgOut]
    unavailable_sites: list[str] = Field(
        default_factory=list, description="Configured sites whose ZVM could not be asked; the VPGs are complete anyway"
    )
    note: str | None = Field(default=None, description="Why the answer is complete although some sites were not asked")


def _site(ref: SiteRef) -> SiteOut:
    return SiteOut(identifier=ref.identifier, name=ref.name, type=ref.type, configured_here=ref.configured)


def _vpg(v: VpgProtection) -> VpgOut:
    return VpgOut(
        identifier=v.identifier,
        name=v.name,
        protected_site=_site(v.protected_site),
        recovery_site=_site(v.recovery_site),
        status=v.status,
        status_name=v.status_name,
        sub_status=v.sub_status,
        sub_status_name=v.sub_status_name,
        flr_enabled=v.is_flr_enabled,
        can_insert_checkpoint=v.can_insert_checkpoint,
        cannot_insert_reason=v.cannot_insert_reason,
    )


# The only database read of a cached lookup; concurrent calls share it (see SharedRead).
_fingerprint = SharedRead(sites_fingerprint)


def protection_out(p: Protection) -> ProtectionOut:
    return ProtectionOut(
        vm_identifier=p.vm_identifier,
        vm_name=p.vm_name,
        vpgs=[_vpg(v) for v in p.vpgs],
        unavailable_sites=list(p.unavailable_sites),
        note=p.note,
    )


def protection_result(p: Protection) -> CallToolResult:
    """The tool's answer: the structured content, and the same as JSON text for older clients."""
    structured = protection_out(p).model_dump(mode="json", by_alias=True)
    text = pydantic_core.to_json(structured, indent=2).decode()
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=structured)


# A cached lookup hands back the same Protection object until it expires, so its rendered
# answer is kept beside it: under load, rendering cost more than the lookup.
_rendered: dict[int, tuple[Protection, CallToolResult]] = {}
_RENDERED_MAX = 5000


def _rendered_result(p: Protection) -> CallToolResult:
    hit = _rendered.get(id(p))
    if hit is not None and hit[0] is p:
        return hit[1]
    result = protection_result(p)
    if len(_rendered) >= _RENDERED_MAX:
        _rendered.clear()
    _rendered[id(p)] = (p, result)  # holding p keeps id(p) from being reused while the entry lives
    return result


async def zerto_find_protection(
    vm: Annotated[
        StrictStr,
        Field(
            description="The VM: its name, a host FQDN or short hostname, an IP address, or "
            'the Zerto vmIdentifier, e.g. "web01" or "web01.corp.example"'
        ),
    ],
) -> Annotated[CallToolResult, ProtectionOut]:
    """Find exactly one VM and every Zerto VPG protecting it, across all configured sites.

    `vm` may be the VM name, a host FQDN or short hostname, or the Zerto vmIdentifier. No match, or
    several VMs matching, is an error that lists the candidates (name, identifier, site); ask again with
    the vmIdentifier then. Each VPG says whether a tagged checkpoint can be inserted, and why not.
    """
    # Cached (the common case under load): answered here on the event loop, no thread hand-off
    # of its own; anything to fetch (a ZVM call, DNS, changed sites) runs on the MCP pool.
    limit = VmLimit.from_claim(current_claims().get(LIMIT_CLAIM))
    try:
        cached = find_protection_cached(vm, await _fingerprint())
    except DatabaseError:
        cached = None  # find_protection reads the sites again and reports its own error
    if cached is not None:
        check_within(limit, cached, agent_name=current_agent_name())
        return _rendered_result(cached)
    found = await run_db(find_protection, vm)
    check_within(limit, found, agent_name=current_agent_name())
    return protection_result(found)


def register(server: MCPServer) -> None:
    server.tool(
        name="zerto_find_protection",
        title="Find the VPGs protecting a VM",
        meta=scopes.tool_meta(scopes.READ),
        annotations=ToolAnnotations(
            title="Find the VPGs protecting a VM",
            read_only_hint=True,
            destructive_hint=False,
            idempotent_hint=True,
            open_world_hint=False,
        ),
    )(zerto_find_protection)
