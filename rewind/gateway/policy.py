"""What a call of an upstream tool may do before it is forwarded: guard, pass, hold, or refuse.

In order:
1. The catalog lists the tool (``server/tool`` or ``server/*``): guard the VM its ``vm_arg``
   names, exactly as ``zerto_guard_before_mutate`` does. A missing VM argument refuses the call.
   A per-host upstream (its ``host_vm`` set: a server that serves one machine) is guarded on
   that VM instead, whatever the arguments say.
2. A person classified the tool read-only (its sighting is ignored): pass.
3. Otherwise the tool's policy, or the upstream's default for tools not annotated read-only
   (read-only ones pass): ``pass``; ``hold`` (refused until classified); ``guard-if-protected``:
   guard on the first argument that names a VM some VPG protects, else pass; on a per-host
   upstream, guard its VM when a VPG protects it, else pass.

Each plan carries a decision (``rewind.policy.models.Decision``): a catalog entry's own, or
``approve`` for a tool whose policy is ``approve``. ``deny`` (the entry's or the tool's policy)
refuses every call; ``approve`` guards like ``guard-if-protected`` (or the catalog's VM), then
holds the call for a person (``ASK`` when no protected VM is named: held without a checkpoint).
The guard then raises ``checkpoint`` to ``approve`` where a VM rule or the agent's setting says so.

Fail-closed: when a look-up cannot tell (a site is unavailable, a name matches several VMs)
the call is refused, never passed.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from catalog.models import ToolSighting
from catalog.services import TOOL_RE, CatalogView, catalog_view
from rewind.checkpoints.services import host_only, vm_from_arguments
from rewind.gateway.models import Policy, UpstreamTool
from rewind.gateway.naming import catalog_name
from rewind.gateway.services import VM_ARG_NAMES
from rewind.lib.errors import ApplicationError
from rewind.policy.models import Decision
from rewind.protection import SitesUnavailableError, VmAmbiguousError, VmNotFoundError, find_protection

# DENY: refused by the policy; ASK: held for a person with no checkpoint (no protected VM named).
GUARD, PASS, HOLD, DENY, ASK = "guard", "pass", "hold", "deny", "ask"
# A value worth asking the ZVMs about: a host name, FQDN, IP or vmIdentifier, maybe user@ or :port.
_HOST_LIKE = re.compile(r"^(?:[^@\s]{1,64}@)?[A-Za-z0-9][A-Za-z0-9._:-]{0,252}$")
# Look-ups per call at most: a tool with many string arguments must not cost a look-up each.
MAX_LOOKUPS = 6


@dataclass(frozen=True)
class Plan:
    action: str  # guard, pass, hold, deny or ask
    reason: str
    catalog_entry: str = ""
    policy: str = ""
    vm: str = ""
    vm_arg: str = ""
    decision: str = Decision.CHECKPOINT  # for a guard: checkpoint, or approve (held for a person after it)
    read_only: bool = False  # passed as read-only (annotated, or classified by a person): no stop refuses it

    def with_decision(self, decision: str) -> Plan:
        return replace(self, decision=decision)


def _single(value: Any) -> Any:
    return value[0] if isinstance(value, (list, tuple)) and len(value) == 1 else value


def _candidates(arguments: Mapping[str, Any], first: str) -> Iterator[tuple[str, str, bool]]:
    """(argument, host, named): arguments whose name says "machine" first, then any host-like string."""
    by_lower = {str(k).lower(): str(k) for k in arguments}
    named = [by_lower[n.lower()] for n in (first, *VM_ARG_NAMES) if n and n.lower() in by_lower]
    for key in [*dict.fromkeys(named), *(str(k) for k in arguments if str(k) not in named)]:
        value = _single(arguments.get(key))
        if isinstance(value, str) and _HOST_LIKE.match(value.strip()):
            yield key, host_only(value.strip()), key in named


def _no_dns(_host: str) -> list[str]:
    return []


def protected_vm_argument(arguments: Mapping[str, Any], *, suggested: str = "") -> tuple[str, str] | None:
    """(argument, VM) for the first argument naming a VM that some VPG protects, else None.

    Arguments named like a machine are also resolved through DNS; other strings only by VM name
    or identifier (a command line is not worth a DNS query). Raises ``ApplicationError`` when it
    cannot tell: the call must then be refused.
    """
    for asked, (key, host, named) in enumerate(_candidates(arguments, suggested)):
        if asked >= MAX_LOOKUPS:
            break
        try:
            found = find_protection(host) if named else find_protection(host, resolver=_no_dns)
        except VmNotFoundError:
            continue
        except (VmAmbiguousError, SitesUnavailableError) as exc:
            raise ApplicationError(
                f"could not tell whether argument {key!r} names a protected VM, so the call is refused: {exc}"
            ) from None
        if found.vpgs:
            return key, host
    return None


def _acts_on(tool: UpstreamTool) -> str:
    return f"upstream {tool.upstream.name} acts on VM {tool.upstream.host_vm}"


def _host_plan(tool: UpstreamTool, policy: str) -> Plan:
    """guard-if-protected on a per-host upstream: its VM, whatever the arguments say. A host VM no ZVM
    knows is a setting gone wrong, and refuses the call rather than pass it unguarded."""
    host = tool.upstream.host_vm
    try:
        found = find_protection(host)
    except VmNotFoundError:
        raise ApplicationError(
            f"{_acts_on(tool)}, which no ZVM knows (fix the upstream's host VM), so the call is refused"
        ) from None
    except (VmAmbiguousError, SitesUnavailableError) as exc:
        raise ApplicationError(
            f"could not tell whether {_acts_on(tool)} is protected, so the call is refused: {exc}"
        ) from None
    if not found.vpgs:
        if policy == Policy.APPROVE:
            return Plan(ASK, f"policy approve; {_acts_on(tool)}, which no VPG protects", policy=policy)
        return Plan(PASS, f"{_acts_on(tool)}, which no VPG protects", policy=policy)
    return Plan(GUARD, f"{_acts_on(tool)}, which a VPG protects", "", policy, host, decision=_decision_of(policy))


def _decision_of(policy: str) -> str:
    return Decision.APPROVE if policy == Policy.APPROVE else Decision.CHECKPOINT


def effective_policy(tool: UpstreamTool) -> str:
    if tool.policy:
        return tool.policy
    return Policy.PASS if tool.read_only else tool.upstream.default_policy


def plan_call(tool: UpstreamTool, arguments: Mapping[str, Any]) -> Plan:
    """Decide; raises ``ApplicationError`` (the call is refused, nothing forwarded) when it cannot."""
    name = catalog_name(tool.upstream.name, tool.name)
    listed = TOOL_RE.match(name) is not None
    view = catalog_view(name) if listed else CatalogView(None, None, "")
    entry = view.entry
    host = tool.upstream.host_vm
    if entry is not None and entry.decision == Decision.DENY:
        return Plan(DENY, f"the catalog entry {entry.pattern} says deny: no call of it is forwarded", entry.pattern)
    if entry is not None and host:
        why = f"the catalog lists it ({entry.pattern}); {_acts_on(tool)}"
        return Plan(GUARD, why, entry.pattern, "", host, decision=entry.decision)
    if entry is not None:
        vm = vm_from_arguments(entry, arguments)
        why = f"the catalog lists it ({entry.pattern})"
        return Plan(GUARD, why, entry.pattern, "", vm, entry.vm_arg, decision=entry.decision)
    if view.sighting_status == ToolSighting.Status.IGNORED:
        return Plan(PASS, "a person classified it read-only", read_only=True)
    policy = effective_policy(tool)
    if policy == Policy.DENY:
        return Plan(DENY, f"the policy of {name} is deny: no call of it is forwarded", policy=policy)
    if policy == Policy.PASS:
        read_only = not tool.policy and tool.read_only
        return Plan(
            PASS, "policy pass" + (" (annotated read-only)" if read_only else ""), policy=policy, read_only=read_only
        )
    if policy == Policy.HOLD:
        return Plan(
            HOLD,
            f"{name} is held until a person classifies it (admin: Catalog, Tool sightings, or the tool's policy "
            "under Gateway, Upstream tools); nothing was forwarded",
            policy=policy,
        )
    if host:
        return _host_plan(tool, policy)
    found = protected_vm_argument(arguments, suggested=view.suggested_vm_arg)
    if found is None:
        if policy == Policy.APPROVE:
            return Plan(ASK, "policy approve; no argument names a protected VM, so no checkpoint", policy=policy)
        return Plan(PASS, "no argument names a protected VM", policy=policy)
    key, vm = found
    return Plan(GUARD, f"argument {key!r} names protected VM {vm}", "", policy, vm, key, decision=_decision_of(policy))
