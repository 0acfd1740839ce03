"""What the gateway looks like to the outside: its upstreams and their tools over REST (the names of
their headers and environment, never the values), and its calls: over REST their records, to the
agent that made one the ``_meta`` of the forwarded result (the id an undo asks for, and the guard)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import Field, WithJsonSchema

from rewind.gateway.models import GatewayCall, Upstream, UpstreamTool
from rewind.lib.rest.outputs import ROWS, OutputModel, optional

META_CALL_ID = "zerto-rewind/call_id"
META_GUARD = "zerto-rewind/guard"


def gateway_call_meta(call: GatewayCall, guard: dict[str, Any] | None = None) -> dict[str, Any]:
    """The keys a forwarded call's result carries in ``_meta`` about the call (and its guard)."""
    meta: dict[str, Any] = {META_CALL_ID: call.call_id}
    if guard is not None:
        meta[META_GUARD] = guard
    return meta


URL_OR_EMPTY = WithJsonSchema(
    {"oneOf": [{"type": "string", "format": "uri"}, {"type": "string", "maxLength": 0}]}, mode="serialization"
)


class GatewayCallOut(OutputModel):
    presents = GatewayCall

    id: int
    call_id: str
    agent_name: str
    upstream_name: str
    tool: str
    exposed_name: str
    arguments: Any
    decision: str
    reason: str
    catalog_entry: str
    policy: str
    vm: str
    vm_arg: str
    change_id: str
    outcome: str
    error: str
    received_at: datetime
    forwarded_at: datetime | None
    ended_at: datetime | None
    request_id: str
    guard: int | None = Field(validation_alias="guard_id")


class UpstreamToolOut(OutputModel):
    presents = UpstreamTool

    id: int
    name: str
    exposed_name: str
    catalog_name: str
    state: str
    problem: str
    policy: str
    annotated_read_only: bool = Field(validation_alias="read_only")
    annotations: Any | None
    held: bool = Field(description="new or changed: not listed to agents, refused if called")
    digest: str
    approved_digest: str
    approved_by: str
    approved_at: datetime | None
    last_listed_at: datetime


class UpstreamOut(OutputModel):
    presents = Upstream

    id: int
    name: str
    transport: str
    url: Annotated[str, URL_OR_EMPTY]
    command: Any
    header_names: list[str]
    env_names: list[str]
    enabled: bool
    connect_timeout_s: float
    call_timeout_s: float
    default_policy: str
    host_vm: str
    tools_listed_at: datetime | None
    last_error: str
    tools: Annotated[list[UpstreamToolOut], ROWS]
    created_at: datetime
    updated_at: datetime


def upstream_out(upstream: Upstream) -> UpstreamOut:
    """The upstream and the names, never the values, of its headers and environment."""
    return UpstreamOut.of(upstream, header_names=sorted(upstream.headers()), env_names=sorted(upstream.env()))


class UpstreamCheckOut(OutputModel):
    """Whether it answered, and the tool listing it gave (stored); a failure is said in error."""

    ok: bool
    error: str | None
    upstream: str | None = optional()
    exported: list[str] | None = optional()
    collisions: list[str] | None = optional(description="Tools refused: their exposed name is taken")
    gone: list[str] | None = optional()
    new_sightings: list[str] | None = optional()
    held: list[str] | None = optional(description="Exported, but new or changed: they wait for a person")
    links_down: list[str] = Field(description="One sentence per process that cannot reach it now")
    links_up: list[str] = Field(description="The processes whose session to it answers now")
    upstream_detail: UpstreamOut | None = optional(description="The upstream as the listing left it")
