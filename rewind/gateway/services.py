"""Every change to upstreams, their tools and forwarded calls goes through here, audited in the same transaction."""

from __future__ import annotations

import functools
import json
import math
import os
import re
import secrets
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from catalog.services import TOOL_RE, tool_sighting_count, tool_sighting_listed, tool_sighting_record
from rewind.agents.selectors import credentials_version_sql
from rewind.audit import Actor, AuditEntry, audit_append, audit_record, mask_secrets
from rewind.audit.actions import GatewayAction
from rewind.gateway.definitions import definition, digest
from rewind.gateway.links import UpstreamSpec
from rewind.gateway.models import GatewayCall, Policy, Upstream, UpstreamLink, UpstreamTool
from rewind.gateway.naming import UPSTREAM_NAME, UPSTREAM_NAME_RULE, catalog_name, exposed_name
from rewind.gateway.secrets import command_credential_problem, url_credential_problem
from rewind.lib import bulk
from rewind.lib.crypto import encrypt
from rewind.lib.errors import ApplicationError
from rewind.mcp.endpoint import MCP_PATH
from rewind.policy.selectors import policy_version_sql, stops_in_force_sql
from rewind.policy.services import policy_version_raise

CONNECT_TIMEOUT_RANGE = (1.0, 120.0)
CALL_TIMEOUT_RANGE = (1.0, 3600.0)
_HEADER_NAME = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,100}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,100}$")
# Arguments that usually name the machine a tool acts on, most telling first: the suggestion
# a person starts from when classifying a sighting, and where guard-if-protected looks first.
VM_ARG_NAMES = ("host", "hosts", "hostname", "computer_name", "computername", "vm", "vm_name", "target", "server")


def _clean_map(value: Mapping[str, Any] | None, *, what: str, key_rule: re.Pattern[str]) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ApplicationError(f"{what} must be an object of names to text values")
    out: dict[str, str] = {}
    for key, val in value.items():
        if not isinstance(key, str) or not key_rule.match(key):
            raise ApplicationError(f"{what}: {str(key)[:40]!r} is not a valid name")
        if not isinstance(val, str) or "\n" in val or "\r" in val:
            raise ApplicationError(f"{what}: the value of {key} must be one line of text")
        out[key] = val
    return out


def _clean_seconds(value: Any, name: str, bounds: tuple[float, float]) -> float:
    low, high = bounds
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ApplicationError(f"{name} must be a number of seconds from {low:g} to {high:g}")
    if not low <= value <= high:
        raise ApplicationError(f"{name} must be a number of seconds from {low:g} to {high:g}")
    return float(value)


def upstream_command_clean(command: Any) -> list[str]:
    """A stdio upstream's command as stored; raises ``ApplicationError`` (never quoting it) when it cannot be."""
    if not isinstance(command, Sequence) or isinstance(command, str) or not command:
        raise ApplicationError(
            'a stdio upstream needs its command as a list: the program, then its arguments, e.g. ["npx", "ssh-mcp"]'
        )
    if not all(isinstance(part, str) and part and "\x00" not in part for part in command):
        raise ApplicationError("every part of the command must be non-empty text")
    problem = command_credential_problem(command)
    if problem is not None:
        raise ApplicationError(problem)
    return list(command)


def upstream_url_clean(url: str) -> str:
    """An HTTP upstream's URL as stored; raises ``ApplicationError`` (never quoting it) when it cannot be."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ApplicationError(
            "an HTTP upstream needs its MCP endpoint as an http(s) URL, e.g. https://ssh-mcp.internal/mcp"
        )
    problem = url_credential_problem(url.strip())
    if problem is not None:
        raise ApplicationError(problem)
    own = urlsplit(settings.REWIND_PUBLIC_URL)
    if parts.netloc.lower() == own.netloc.lower() and parts.path.rstrip("/") == MCP_PATH:
        raise ApplicationError("that is this service's own MCP endpoint: an upstream must be another server")
    return url.strip()


def _validate(upstream: Upstream) -> None:
    if not UPSTREAM_NAME.match(upstream.name):
        raise ApplicationError(f"an upstream name is {UPSTREAM_NAME_RULE}")
    if upstream.transport == Upstream.Transport.HTTP:
        upstream.url = upstream_url_clean(upstream.url)
    elif upstream.transport == Upstream.Transport.STDIO:
        upstream.command = upstream_command_clean(upstream.command)
    else:
        raise ApplicationError("transport must be http or stdio")
    if upstream.default_policy not in Policy.values:
        raise ApplicationError(f"default_policy must be one of {', '.join(Policy.values)}")
    upstream.connect_timeout_s = _clean_seconds(upstream.connect_timeout_s, "connect_timeout_s", CONNECT_TIMEOUT_RANGE)
    upstream.call_timeout_s = _clean_seconds(upstream.call_timeout_s, "call_timeout_s", CALL_TIMEOUT_RANGE)
    upstream.host_vm = _clean_host_vm(upstream.host_vm)


def _clean_host_vm(value: Any) -> str:
    text = value.strip() if isinstance(value, str) else None
    if text is None or len(text) > 255 or any(c.isspace() or not c.isprintable() for c in text):
        raise ApplicationError("host_vm must be one VM's name, hostname or identifier (no spaces), or empty")
    return text


@transaction.atomic
def upstream_create(
    *,
    actor: Actor,
    name: str,
    transport: str = Upstream.Transport.HTTP,
    url: str = "",
    headers: Mapping[str, str] | None = None,
    command: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    enabled: bool = True,
    connect_timeout_s: float = 10.0,
    call_timeout_s: float = 300.0,
    default_policy: str = Policy.GUARD_IF_PROTECTED,
    host_vm: str = "",
) -> Upstream:
    upstream = Upstream(
        name=str(name).strip().lower(),
        host_vm=host_vm,
        transport=transport,
        url=url,
        command=command if command is not None else [],
        enabled=enabled,
        connect_timeout_s=connect_timeout_s,
        call_timeout_s=call_timeout_s,
        default_policy=default_policy,
        headers_encrypted=encrypt(json.dumps(_clean_map(headers, what="headers", key_rule=_HEADER_NAME))),
        env_encrypted=encrypt(json.dumps(_clean_map(env, what="env", key_rule=_ENV_NAME))),
    )
    _validate(upstream)
    if Upstream.objects.filter(name=upstream.name).exists():
        raise ApplicationError(f"an upstream named {upstream.name!r} already exists")
    upstream.save()
    audit_record(
        actor=actor, action=GatewayAction.UPSTREAM_CREATED, target=upstream, data={"after": upstream.audit_data()}
    )
    policy_version_raise(actor=actor, what=f"upstream {upstream.name} added (default policy {upstream.default_policy})")
    return upstream


_EDITABLE = (
    "transport",
    "url",
    "command",
    "enabled",
    "connect_timeout_s",
    "call_timeout_s",
    "default_policy",
    "host_vm",
)


@transaction.atomic
def upstream_update(
    *,
    actor: Actor,
    upstream: Upstream,
    headers: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
    **fields: Any,
) -> Upstream:
    """Change settings; ``headers``/``env`` replace the stored ones when given. The name stays:
    catalog entries and exposed names are built from it."""
    unknown = set(fields) - set(_EDITABLE)
    if unknown:
        raise ApplicationError(f"these cannot be changed: {', '.join(sorted(unknown))}")
    locked = Upstream.objects.select_for_update(no_key=True).get(pk=upstream.pk)  # calls need not wait (see below)
    before = locked.audit_data()
    for key, value in fields.items():
        setattr(locked, key, value)
    if headers is not None:
        locked.headers_encrypted = encrypt(json.dumps(_clean_map(headers, what="headers", key_rule=_HEADER_NAME)))
    if env is not None:
        locked.env_encrypted = encrypt(json.dumps(_clean_map(env, what="env", key_rule=_ENV_NAME)))
    _validate(locked)
    locked.save()
    audit_record(
        actor=actor,
        action=GatewayAction.UPSTREAM_CHANGED,
        target=locked,
        data={
            "before": before,
            "after": locked.audit_data(),
            "credentials_replaced": headers is not None or env is not None,
        },
    )
    if before["default_policy"] != locked.default_policy or before["host_vm"] != locked.host_vm:
        policy_version_raise(actor=actor, what=f"upstream {locked.name}: default policy or host VM changed")
    return locked


# Decrypted once per process for each version of an upstream's settings: every call needs them.
_specs: dict[tuple[int, str], UpstreamSpec] = {}
SPECS_KEPT = 256


def upstream_spec(upstream: Upstream) -> UpstreamSpec:
    """How to reach the upstream (its credentials decrypted)."""
    key = (upstream.pk, upstream.updated_at.isoformat() if upstream.updated_at else "")
    spec = _specs.get(key)
    if spec is None or not key[1]:
        spec = _build_spec(upstream)
        if len(_specs) >= SPECS_KEPT:
            _specs.clear()
        _specs[key] = spec
    return spec


def _build_spec(upstream: Upstream) -> UpstreamSpec:
    return UpstreamSpec(
        pk=upstream.pk,
        name=upstream.name,
        transport=upstream.transport,
        url=upstream.url,
        headers=tuple(sorted(upstream.headers().items())),
        command=tuple(upstream.command),
        env=tuple(sorted(upstream.env().items())),
        connect_timeout_s=upstream.connect_timeout_s,
        call_timeout_s=upstream.call_timeout_s,
        version=upstream.updated_at.isoformat() if upstream.updated_at else "",
    )


# -- listing -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ListedTool:
    """One tool as an upstream listed it (the SDK's ``Tool``, as plain data)."""

    name: str
    title: str
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None
    annotations: dict[str, Any] | None
    meta: dict[str, Any] | None


@dataclass
class ListingReport:
    upstream: str
    exported: list[str] = field(default_factory=list)
    collisions: list[str] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)
    new_sightings: list[str] = field(default_factory=list)
    held: list[str] = field(default_factory=list)  # exported, but new or changed: waits for a person


def suggested_vm_arg(input_schema: Mapping[str, Any]) -> str:
    """The argument most likely to name the VM: a usual name, else one that mentions host or vm."""
    properties = input_schema.get("properties")
    names = [str(k) for k in properties] if isinstance(properties, Mapping) else []
    by_lower = {n.lower(): n for n in names}
    for usual in VM_ARG_NAMES:
        if usual in by_lower:
            return by_lower[usual]
    return next((n for n in names if any(w in n.lower() for w in ("host", "vm", "computer", "machine"))), "")


def _argument_names(input_schema: Mapping[str, Any]) -> list[str]:
    properties = input_schema.get("properties")
    return [str(k) for k in properties] if isinstance(properties, Mapping) else []


@transaction.atomic
def upstream_tools_record(*, upstream: Upstream, listed: Sequence[ListedTool], reserved: set[str]) -> ListingReport:
    """Store what an upstream listed; each exposed name is checked against every other exported name.

    ``reserved``: the names this server's own tools use. A tool whose exposed name another
    tool already holds (this server's, another upstream's, or one listed before it) is refused:
    it is kept with state ``collision`` and the name it wanted, and agents do not see it.
    A tool the catalog does not list becomes a sighting before anyone calls it.
    """
    # FOR NO KEY UPDATE: listings of one upstream still wait for each other, while a call's row
    # (whose foreign key takes a key-share lock on this row when its transaction commits) does
    # not wait for a listing. It would while holding its tool's sighting, which the listing locks
    # next: PostgreSQL found that deadlock once in a 30-minute soak (bench/load.py).
    locked = Upstream.objects.select_for_update(no_key=True).get(pk=upstream.pk)
    now = timezone.now()
    report = ListingReport(upstream=locked.name)
    taken = set(reserved) | set(
        UpstreamTool.objects.filter(state=UpstreamTool.State.EXPORTED)
        .exclude(upstream=locked)
        .values_list("exposed_name", flat=True)
    )
    known = {t.name: t for t in locked.tools.all()}
    seen: set[str] = set()
    for tool in listed:
        if tool.name in seen:
            continue
        seen.add(tool.name)
        exposed = exposed_name(locked.name, tool.name)
        row = known.get(tool.name) or UpstreamTool(upstream=locked, name=tool.name)
        row.exposed_name = exposed
        row.title, row.description = tool.title[:200], tool.description
        row.input_schema, row.output_schema = tool.input_schema, tool.output_schema
        row.annotations, row.meta = tool.annotations, tool.meta
        row.last_listed_at = now
        _pin(row, new=tool.name not in known)
        if exposed in taken:
            row.state = UpstreamTool.State.COLLISION
            row.problem = f"its name here, {exposed}, is already another tool's; rename it upstream to export it"
            report.collisions.append(tool.name)
        else:
            row.state, row.problem = UpstreamTool.State.EXPORTED, ""
            taken.add(exposed)
            report.exported.append(tool.name)
            if row.held:
                report.held.append(tool.name)
        row.save()
        if _catalog_name_valid(locked.name, tool.name):
            _sighting, new = tool_sighting_listed(
                tool=catalog_name(locked.name, tool.name),
                argument_names=_argument_names(tool.input_schema),
                annotations=tool.annotations,
                suggested_vm_arg=suggested_vm_arg(tool.input_schema),
            )
            if new:
                report.new_sightings.append(tool.name)
    for name, row in known.items():
        if name not in seen and row.state != UpstreamTool.State.GONE:
            row.state, row.problem = UpstreamTool.State.GONE, "the upstream's last listing did not have it"
            row.save(update_fields=["state", "problem"])
            report.gone.append(name)
    locked.tools_listed_at, locked.last_error = now, ""
    locked.save(update_fields=["tools_listed_at", "last_error"])
    audit_record(
        actor=Actor.system("gateway"),
        action=GatewayAction.TOOLS_LISTED,
        target=locked,
        data={k: v for k, v in report.__dict__.items() if k != "upstream"},
    )
    return report


def _pin(row: UpstreamTool, *, new: bool) -> None:
    """The digest of what was listed; a new tool is approved on first sight only where the setting trusts it."""
    defined = definition(row)
    row.digest = digest(defined)
    if new and settings.REWIND_GATEWAY_TRUST_NEW_TOOLS:
        row.approved_digest, row.approved_definition = row.digest, defined
        row.approved_by, row.approved_at = "first sight (REWIND_GATEWAY_TRUST_NEW_TOOLS)", timezone.now()


@transaction.atomic
def upstream_tool_approve(*, actor: Actor, tool: UpstreamTool, seen_digest: str) -> UpstreamTool:
    """Approve the tool's definition as listed now, which must be the one the person saw (``seen_digest``):
    a definition that changed again while they looked is not approved unseen."""
    locked = UpstreamTool.objects.select_for_update().select_related("upstream").get(pk=tool.pk)
    if locked.digest != seen_digest:
        raise ApplicationError(
            f"{locked.catalog_name}: its definition changed again since the page was shown; look at the new one"
        )
    if not locked.held:
        return locked
    before = locked.approved_digest
    locked.approved_digest, locked.approved_definition = locked.digest, definition(locked)
    locked.approved_by, locked.approved_at = actor.name, timezone.now()
    locked.save(update_fields=["approved_digest", "approved_definition", "approved_by", "approved_at"])
    audit_record(
        actor=actor,
        action=GatewayAction.TOOL_DEFINITION_APPROVED,
        target=("gateway.tool", locked.catalog_name),
        data={"before": before, "after": locked.digest, "first": not before},
    )
    return locked


def upstream_tools_approve_listed(*, actor: Actor, upstream: Upstream) -> list[str]:
    """Approve every held tool of the upstream as it is listed now (a person who read them all, or a
    set-up that added the upstream itself); the names approved."""
    held = (
        UpstreamTool.objects.filter(upstream=upstream).exclude(digest=F("approved_digest")).select_related("upstream")
    )
    return [upstream_tool_approve(actor=actor, tool=t, seen_digest=t.digest).name for t in held]


def _catalog_name_valid(server: str, tool: str) -> bool:

    return bool(TOOL_RE.match(catalog_name(server, tool)))


@transaction.atomic
def upstream_listing_failed(*, upstream: Upstream, error: str) -> None:
    changed = Upstream.objects.filter(pk=upstream.pk).exclude(last_error=error).update(last_error=error[:1000])
    if changed:
        audit_record(
            actor=Actor.system("gateway"),
            action=GatewayAction.TOOLS_LIST_FAILED,
            target=upstream,
            data={"error": error[:500]},
        )


@transaction.atomic
def upstream_tool_set_policy(*, actor: Actor, tool: UpstreamTool, policy: str) -> UpstreamTool:
    if policy and policy not in Policy.values:
        raise ApplicationError(f"policy must be empty or one of {', '.join(Policy.values)}")
    locked = UpstreamTool.objects.select_for_update().get(pk=tool.pk)
    before = locked.policy
    locked.policy = policy
    locked.save(update_fields=["policy"])
    audit_record(
        actor=actor,
        action=GatewayAction.TOOL_POLICY_CHANGED,
        target=("gateway.tool", f"{tool.upstream.name}/{tool.name}"),
        data={"before": before, "after": policy},
    )
    if before != policy:
        policy_version_raise(
            actor=actor, what=f"gateway tool {tool.upstream.name}/{tool.name}: policy {policy or 'default'}"
        )
    return locked


# -- calls ---------------------------------------------------------------------------------


def new_call_id() -> str:
    return "gwc_" + secrets.token_urlsafe(12)


@functools.cache
def _exported_tool_sql() -> str:
    return (
        f"SELECT {credentials_version_sql()}, {policy_version_sql()}, {stops_in_force_sql()},"
        f" {bulk.columns(UpstreamTool, 't')}, {bulk.columns(Upstream, 'u')}"
        f" FROM {bulk.table(UpstreamTool)} t INNER JOIN {bulk.table(Upstream)} u ON u.id = t.upstream_id"
        " WHERE t.exposed_name = %s AND t.state = %s AND u.enabled = %s"
    )


@dataclass(frozen=True)
class Exported:
    tool: UpstreamTool  # with its upstream
    spec: UpstreamSpec
    credentials_version: int  # read in the same statement (``rewind.agents.models.CredentialsVersion``)
    policy_version: int  # and the policy's (``rewind.policy``), with how many stops are in force
    stops_in_force: int


def exported_tool(exposed: str) -> Exported | None:
    """The tool agents call by ``exposed`` and how to reach its upstream, read afresh; None when not exported.

    One statement built once per process (the ORM's select_related cost more CPU than the read),
    which also reads the credentials version (a revoked token is then refused without a query of its
    own), the policy's version and how many stops are in force (none: no query more for them).
    """
    with connection.cursor() as cursor:
        cursor.execute(_exported_tool_sql(), [exposed, UpstreamTool.State.EXPORTED, True])
        row = cursor.fetchone()
    if row is None:
        return None
    split = 3 + bulk.column_count(UpstreamTool)
    tool = bulk.model_from_row(UpstreamTool, row[3:split])
    tool.upstream = bulk.model_from_row(Upstream, row[split:])
    return Exported(tool, upstream_spec(tool.upstream), int(row[0]), int(row[1]), int(row[2]))


def _new_call(
    *,
    agent_name: str,
    agent_id: int | None,
    tool: UpstreamTool,
    arguments: Mapping[str, Any],
    request_id: str,
    policy_version: int | None = None,
) -> GatewayCall:
    return GatewayCall(
        call_id=new_call_id(),
        agent_name=agent_name,
        agent_id=agent_id,
        upstream=tool.upstream,
        upstream_name=tool.upstream.name,
        tool=tool.name,
        exposed_name=tool.exposed_name,
        arguments=mask_secrets(dict(arguments)),
        request_id=request_id,
        policy_version=policy_version,
    )


@transaction.atomic
def gateway_call_open(
    *,
    agent_name: str,
    agent_id: int | None,
    tool: UpstreamTool,
    arguments: Mapping[str, Any],
    request_id: str,
    suggested_vm_arg: str = "",
    policy_version: int | None = None,
) -> GatewayCall:
    """The row of a call whose decision takes a while (a guard): it exists even if deciding fails.

    ``suggested_vm_arg``: an unlisted tool guarded by its policy counts as a sighting, with the
    argument that named a protected VM as the one to classify it with.
    """
    call = _new_call(
        agent_name=agent_name,
        agent_id=agent_id,
        tool=tool,
        arguments=arguments,
        request_id=request_id,
        policy_version=policy_version,
    )
    bulk.insert_row(call)
    if suggested_vm_arg:
        _sighting(tool, agent_name, arguments, suggested_vm_arg)
    return call


def _sighting(tool: UpstreamTool, agent_name: str, arguments: Mapping[str, Any], suggested_vm_arg: str = "") -> None:
    try:
        if not suggested_vm_arg:  # a forwarded call: counted, in one statement once its names are merged
            tool_sighting_count(
                tool=catalog_name(tool.upstream.name, tool.name),
                agent_name=agent_name,
                argument_names=[str(k) for k in arguments],
            )
            return
        tool_sighting_record(
            tool=catalog_name(tool.upstream.name, tool.name),
            agent_name=agent_name,
            argument_names=[str(k) for k in arguments],
            suggested_vm_arg=suggested_vm_arg,
        )
    except ApplicationError:
        pass  # a name the catalog cannot hold: the call row and its audit still record it


@transaction.atomic(savepoint=False)
def gateway_call_record(
    *,
    agent_name: str,
    agent_id: int | None,
    tool: UpstreamTool,
    arguments: Mapping[str, Any],
    request_id: str,
    decision: str,
    reason: str,
    sighted: bool = False,
    policy_version: int | None = None,
    **fields: Any,
) -> GatewayCall:
    """A call decided at once (passed, held or refused): its row, its sighting and its audit, in one transaction."""
    call = _new_call(
        agent_name=agent_name,
        agent_id=agent_id,
        tool=tool,
        arguments=arguments,
        request_id=request_id,
        policy_version=policy_version,
    )
    if sighted:
        _sighting(tool, agent_name, arguments)
    return gateway_call_decide(call=call, decision=decision, reason=reason, **fields)


# No savepoint when called inside gateway_call_record: nothing there recovers from a failure inside.
@transaction.atomic(savepoint=False)
def gateway_call_decide(*, call: GatewayCall, decision: str, reason: str = "", **fields: Any) -> GatewayCall:
    """Record the decision and, for a forwarded call, its start time, audited: fail-closed.

    If this cannot be written, nothing is forwarded.
    """
    call.decision, call.reason = decision, reason[:500]
    for key, value in fields.items():
        setattr(call, key, value)
    forwarded = decision in (
        GatewayCall.Decision.GUARDED,
        GatewayCall.Decision.PASSED,
        GatewayCall.Decision.RELEASED,
    )
    awaiting = decision == GatewayCall.Decision.AWAITING
    if forwarded:
        call.outcome, call.forwarded_at = GatewayCall.Outcome.FORWARDED, timezone.now()
    elif awaiting:
        call.outcome = GatewayCall.Outcome.DECIDING
    else:
        call.outcome, call.ended_at = GatewayCall.Outcome.NOT_FORWARDED, timezone.now()
    if call.pk is None:
        bulk.insert_row(call)  # a call decided at once: its row goes in with its decision
    else:
        call.save()
    # audit_append, not audit_record: nothing here reads the event back (one query less per call).
    # Left waiting to be chained: the call's own mcp.tool.called row follows from the MCP audit
    # writer, whose batch chains it with the rest (on PostgreSQL a chaining in the decision's
    # transaction and another after its commit cost more than the decision's own writes).
    entry = AuditEntry(
        actor=Actor.agent(call.agent_name),
        action=GatewayAction.CALL_DECIDED,
        target=("gateway.call", call.call_id),
        request_id=call.request_id or None,
        data={
            "call_id": call.call_id,
            "tool": f"{call.upstream_name}/{call.tool}",
            "decision": decision,
            "reason": call.reason,
            "catalog_entry": call.catalog_entry,
            "policy": call.policy,
            "vm": call.vm,
            "vm_arg": call.vm_arg,
            "change_id": call.change_id,
            "guard": call.guard_id,
            "policy_version": call.policy_version,
            "forwarded_at": call.forwarded_at.isoformat() if call.forwarded_at else None,
        },
    )
    audit_append([entry], chain=False)
    return call


def gateway_call_finish(*, call: GatewayCall, outcome: str, error: str = "") -> None:
    """How the forwarded call ended. Not a second audit row: the call's ``mcp.tool.called`` row
    (same request id as its ``gateway.call.decided`` row) records the outcome and the error.

    Every forwarded call ends here, so in a statement built once (``bulk.update_rows``): 0.025 ms of
    CPU against 0.11 ms for the ORM's ``update()`` (SQLite, measured here)."""
    call.outcome, call.error, call.ended_at = outcome, error[:500], timezone.now()
    bulk.update_rows([call], ("outcome", "error", "ended_at"))


def upstream_asked_record(*, upstream_id: int, kind: str, summary: Mapping[str, Any], refused: str) -> None:
    """An upstream asked the agent's side for ``kind`` (sampling, elicitation, roots) and was refused."""
    upstream = Upstream.objects.get(pk=upstream_id)
    audit_record(
        actor=Actor.system("gateway"),
        action=GatewayAction.UPSTREAM_ASKED,
        target=upstream,
        data={"kind": kind, "asked": mask_secrets(dict(summary)), "refused": refused},
    )


LINKS_KEPT = timedelta(days=7)


def this_process() -> str:
    return f"{socket.gethostname()} pid {os.getpid()}"


def upstream_link_record(*, upstream_id: int, down_since: datetime | None, error: str) -> None:
    """This process's session to the upstream went down (``down_since``) or answers again (None).

    Not audited: a flapping upstream would flood the log; the call rows say what each call met.
    """
    now = timezone.now()
    UpstreamLink.objects.update_or_create(
        upstream_id=upstream_id,
        process=this_process(),
        defaults={"down_since": down_since, "error": error[:300], "changed_at": now},
    )
    UpstreamLink.objects.filter(changed_at__lt=now - LINKS_KEPT).delete()
