"""Catalog services: every change to the mutating-tool catalog and to sightings goes here.

Rules:
- Agents (and humans) may add entries; only humans (``Actor.user``) update, disable or
  remove them, and only humans classify sightings. An agent must never be able to switch
  the guard off for a tool it is about to call.
- Every change is audited (who, before, after) inside the same transaction.
- Names: a tool is ``server/tool``; an entry is that or ``server/*``. Both parts are
  letters, digits, ``_``, ``.`` and ``-`` (MCP's own tool-name alphabet). Entries are
  stored lower-case and a tool name is matched lower-cased (see ``catalog.models``).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from catalog.models import MutatingTool, ToolSighting
from rewind.audit import Actor, audit_record
from rewind.audit.actions import CatalogAction
from rewind.audit.models import AuditEvent
from rewind.lib import bulk
from rewind.lib.errors import ApplicationError, PermissionDeniedError
from rewind.policy.models import Decision
from rewind.policy.services import policy_version_raise

_PART = r"[a-z0-9_.-]+"
PATTERN_RE = re.compile(rf"^{_PART}/({_PART}|\*)$", re.IGNORECASE)
TOOL_RE = re.compile(rf"^{_PART}/{_PART}$", re.IGNORECASE)
VM_ARG_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,99}$")
_EDITABLE = ("vm_arg", "platform", "description", "enabled", "decision")
# Sightings keep at most this many agent and argument names: a tool called with ever-new
# argument names must not grow one row without bound.
_SIGHTING_LIST_MAX = 50


def normalize_pattern(pattern: str) -> str:
    """The stored form of an entry: stripped, lower case; raises ApplicationError when malformed."""
    value = (pattern or "").strip().lower()
    if not PATTERN_RE.match(value):
        raise ApplicationError(
            f"{pattern!r} is not a catalog entry: use server/tool (e.g. ssh/exec) or server/* "
            "(letters, digits, '_', '.', '-')"
        )
    return value


def normalize_tool_name(tool: str) -> str:
    """A concrete tool name as matched: stripped, lower case; raises ApplicationError when malformed."""
    value = (tool or "").strip().lower()
    if not TOOL_RE.match(value):
        raise ApplicationError(
            f"{tool!r} is not a tool name: give it as server/tool, e.g. ssh/exec (letters, digits, '_', '.', '-')"
        )
    return value


def validate_entry_fields(*, vm_arg: str, platform: str, description: str, decision: str = Decision.CHECKPOINT) -> None:
    """Raises ApplicationError when an entry's fields are unusable."""
    if decision not in Decision.values:
        raise ApplicationError(f"decision must be one of {', '.join(Decision.values)}, not {decision!r}")
    if not VM_ARG_RE.match(vm_arg or ""):
        raise ApplicationError(
            f"vm_arg {vm_arg!r} is not an argument name: it names the tool argument that holds the VM (e.g. host)"
        )
    if platform not in MutatingTool.Platform.values:
        raise ApplicationError(f"platform must be one of {', '.join(MutatingTool.Platform.values)}, not {platform!r}")
    if not (description or "").strip():
        raise ApplicationError("a catalog entry needs a description (what the tool changes)")


def _require_human(actor: Actor, what: str) -> None:
    if actor.type != AuditEvent.ActorType.USER:
        raise PermissionDeniedError(f"only a person may {what}; agents may only add entries")


def mutating_tool_add(
    *,
    actor: Actor,
    pattern: str,
    vm_arg: str,
    platform: str = MutatingTool.Platform.ANY,
    description: str,
    decision: str = Decision.CHECKPOINT,
) -> MutatingTool:
    """Add an entry. Raises ApplicationError for bad input or an existing entry. Not repeatable.

    Raises the policy's version: an agent may add an entry (any decision only asks more of a call),
    never lower one."""
    value = normalize_pattern(pattern)
    vm_arg = (vm_arg or "").strip()
    validate_entry_fields(vm_arg=vm_arg, platform=platform, description=description, decision=decision)
    try:
        with transaction.atomic():
            tool = MutatingTool.objects.create(
                pattern=value,
                vm_arg=vm_arg,
                platform=platform,
                description=description.strip()[:500],
                decision=decision,
                added_by=actor.name[:150],
                added_by_kind=actor.type,
            )
            audit_record(
                actor=actor,
                action=CatalogAction.TOOL_ADDED,
                target=tool,
                data={"before": None, "after": tool.audit_data()},
            )
            policy_version_raise(actor=actor, what=f"catalog entry {value} added ({decision})")
    except IntegrityError:
        raise ApplicationError(f"the catalog already has an entry {value!r}") from None
    return tool


@transaction.atomic
def mutating_tool_update(*, actor: Actor, tool: MutatingTool, **fields: Any) -> MutatingTool:
    """Change vm_arg, platform, description, enabled or decision (humans only). Audited with before/after;
    a change raises the policy's version."""
    _require_human(actor, "change a catalog entry")
    unknown = set(fields) - set(_EDITABLE)
    if unknown:
        raise ApplicationError(f"these catalog fields cannot be changed: {', '.join(sorted(unknown))}")
    locked = MutatingTool.objects.select_for_update().get(pk=tool.pk)
    before = locked.audit_data()
    for key, value in fields.items():
        setattr(locked, key, value.strip() if isinstance(value, str) else value)
    validate_entry_fields(
        vm_arg=locked.vm_arg, platform=locked.platform, description=locked.description, decision=locked.decision
    )
    locked.save()
    after = locked.audit_data()
    if after != before:
        audit_record(
            actor=actor, action=CatalogAction.TOOL_CHANGED, target=locked, data={"before": before, "after": after}
        )
        policy_version_raise(actor=actor, what=f"catalog entry {locked.pattern} changed")
    return locked


def mutating_tool_disable(*, actor: Actor, tool: MutatingTool) -> MutatingTool:
    """Stop an entry from guarding anything (humans only). Harmless to repeat."""
    return mutating_tool_update(actor=actor, tool=tool, enabled=False)


@transaction.atomic
def mutating_tool_remove(*, actor: Actor, tool: MutatingTool) -> None:
    """Delete an entry (humans only). Sightings of its tools start again from here."""
    _require_human(actor, "remove a catalog entry")
    locked = MutatingTool.objects.select_for_update().filter(pk=tool.pk).first()
    if locked is None:
        return
    before = locked.audit_data()
    audit_record(
        actor=actor,
        action=CatalogAction.TOOL_REMOVED,
        target=("catalog.mutatingtool", str(locked.pk)),
        data={"before": before, "after": None},
    )
    policy_version_raise(actor=actor, what=f"catalog entry {locked.pattern} removed")
    locked.delete()


def mutating_tool_match(tool: str) -> MutatingTool | None:
    """The enabled entry covering ``tool`` (already normalized): exact beats ``server/*``."""
    server = tool.split("/", 1)[0]
    candidates = {t.pattern: t for t in MutatingTool.objects.filter(pattern__in=[tool, f"{server}/*"], enabled=True)}
    return candidates.get(tool) or candidates.get(f"{server}/*")


@dataclass(frozen=True)
class CatalogView:
    """What the catalog says of one tool, as a call's decision needs it (``catalog_view``)."""

    entry: MutatingTool | None  # the enabled entry covering it: exact beats ``server/*``
    sighting_status: str | None  # its sighting's status; None: never sighted
    suggested_vm_arg: str  # its sighting's suggested VM argument, "" when none


@functools.cache
def _view_sql() -> str:
    return (
        f"SELECT s.status, s.suggested_vm_arg, {bulk.columns(MutatingTool, 'm')}"
        f" FROM (SELECT 1 AS one) o LEFT JOIN {bulk.table(ToolSighting)} s ON s.tool = %s"
        f" LEFT JOIN {bulk.table(MutatingTool)} m ON m.pattern IN (%s, %s) AND m.enabled = %s"
    )


def catalog_view(tool: str) -> CatalogView:
    """The entry covering ``tool`` (already normalized) and its sighting, read afresh in one statement.

    Every forwarded call reads it: one statement built once per process, never a cache, so a
    change a person makes decides the very next call.
    """
    server = tool.split("/", 1)[0]
    with connection.cursor() as cursor:
        cursor.execute(_view_sql(), [tool, tool, f"{server}/*", True])
        rows = cursor.fetchall()
    status, suggested = rows[0][0], rows[0][1] or ""
    entries = {e.pattern: e for e in (bulk.model_from_row(MutatingTool, r[2:]) for r in rows if r[2] is not None)}
    return CatalogView(entries.get(tool) or entries.get(f"{server}/*"), status, suggested)


def mutating_tool_list(*, include_disabled: bool = False) -> list[MutatingTool]:
    qs = MutatingTool.objects.all() if include_disabled else MutatingTool.objects.filter(enabled=True)
    return list(qs.order_by("pattern"))


def _merged(existing: list[Any], new: list[str]) -> list[str]:
    out = [str(x) for x in existing]
    for item in new:
        if item not in out and len(out) < _SIGHTING_LIST_MAX:
            out.append(item)
    return out


def _locked_sighting(tool: str, now: datetime) -> ToolSighting:
    # The row is created once (unique tool) and then locked to merge, so two at once both count.
    # Every call of an unlisted tool comes here: a row that exists costs one query.
    locked = ToolSighting.objects.select_for_update().filter(tool=tool).first()
    if locked is not None:
        return locked
    try:
        with transaction.atomic():
            ToolSighting.objects.create(tool=tool, last_seen_at=now)
    except IntegrityError:
        pass  # a concurrent first sighting created it
    return ToolSighting.objects.select_for_update().get(tool=tool)


def tool_sighting_record(
    *, tool: str, agent_name: str, argument_names: list[str], suggested_vm_arg: str = ""
) -> ToolSighting:
    """Count one call of an unlisted tool (guarded by hand or forwarded). Call inside the caller's transaction.

    ``suggested_vm_arg``: an argument seen holding a protected VM's name; it replaces a guess.
    """
    tool = normalize_tool_name(tool)
    names = sorted({str(n)[:100] for n in argument_names})[:_SIGHTING_LIST_MAX]
    now = timezone.now()
    # No savepoint inside the caller's transaction: nothing there recovers from a failure here.
    with transaction.atomic(savepoint=False):
        sighting = _locked_sighting(tool, now)
        sighting.count += 1
        sighting.last_seen_at = now
        sighting.agents = _merged(sighting.agents, [agent_name])
        sighting.argument_names = _merged(sighting.argument_names, names)
        if suggested_vm_arg:
            sighting.suggested_vm_arg = suggested_vm_arg[:100]
        sighting.save(update_fields=["count", "last_seen_at", "agents", "argument_names", "suggested_vm_arg"])
    return sighting


# A call of an unlisted tool whose agent and argument names this process already merged into the
# sighting: the lists only grow, so counting it is one UPDATE (no read, no lock held while
# merging). By (tool, agent, argument names): the row id.
_merged_rows: dict[tuple[str, str, tuple[str, ...]], int] = {}
_MERGED_KEPT = 4096


@functools.cache
def _count_sql() -> str:
    return f"UPDATE {bulk.table(ToolSighting)} SET count = count + 1, last_seen_at = %s WHERE id = %s AND tool = %s"


def tool_sighting_count(*, tool: str, agent_name: str, argument_names: list[str]) -> None:
    """``tool_sighting_record`` for a forwarded call: one statement when this process has merged
    the same agent and argument names into the same row before. Call inside the caller's transaction."""
    tool = normalize_tool_name(tool)
    key = (tool, agent_name, tuple(sorted({str(n)[:100] for n in argument_names})[:_SIGHTING_LIST_MAX]))
    pk = _merged_rows.get(key)
    if pk is not None:
        when = ToolSighting._meta.get_field("last_seen_at").get_db_prep_save(timezone.now(), connection)
        with connection.cursor() as cursor:
            cursor.execute(_count_sql(), [when, pk, tool])
            if cursor.rowcount == 1:
                return
    sighting = tool_sighting_record(tool=tool, agent_name=agent_name, argument_names=argument_names)
    if len(_merged_rows) >= _MERGED_KEPT:
        _merged_rows.clear()
    # Kept before the caller commits: a row that is rolled back matches no UPDATE (id and tool), so
    # the next call merges again.
    _merged_rows[key] = sighting.pk


def tool_sighting_listed(
    *, tool: str, argument_names: list[str], annotations: dict[str, Any] | None, suggested_vm_arg: str
) -> tuple[ToolSighting, bool]:
    """Record a tool an upstream listed before anyone called it; returns (sighting, new).

    Counts no call. A listing refreshes the annotations and fills a missing suggestion; a
    suggestion learned from a call (a protected VM seen in that argument) is kept.
    """
    tool = normalize_tool_name(tool)
    names = sorted({str(n)[:100] for n in argument_names})[:_SIGHTING_LIST_MAX]
    with transaction.atomic():
        new = not ToolSighting.objects.filter(tool=tool).exists()
        sighting = _locked_sighting(tool, timezone.now())
        sighting.argument_names = _merged(sighting.argument_names, names)
        sighting.annotations = annotations
        if not sighting.suggested_vm_arg:
            sighting.suggested_vm_arg = suggested_vm_arg[:100]
        sighting.save(update_fields=["argument_names", "annotations", "suggested_vm_arg"])
    return sighting, new


@transaction.atomic
def tool_sighting_classify_mutating(
    *,
    actor: Actor,
    sighting: ToolSighting,
    vm_arg: str,
    platform: str = MutatingTool.Platform.ANY,
    description: str = "",
) -> MutatingTool:
    """A human judged the tool mutating: add it to the catalog and mark the sighting added."""
    _require_human(actor, "classify a tool sighting")
    locked = ToolSighting.objects.select_for_update().get(pk=sighting.pk)
    before = locked.audit_data()
    entry = mutating_tool_add(
        actor=actor,
        pattern=locked.tool,
        vm_arg=vm_arg,
        platform=platform,
        description=description or f"Added from a sighting of {locked.tool}",
    )
    _sighting_classified(locked, ToolSighting.Status.ADDED, actor)
    audit_record(
        actor=actor,
        action=CatalogAction.SIGHTING_CLASSIFIED_MUTATING,
        target=locked,
        data={"before": before, "after": locked.audit_data(), "entry": entry.pattern, "vm_arg": entry.vm_arg},
    )
    return entry


@transaction.atomic
def tool_sighting_classify_readonly(*, actor: Actor, sighting: ToolSighting) -> ToolSighting:
    """A human judged the tool read-only: the sighting is ignored from now on (still counted)."""
    _require_human(actor, "classify a tool sighting")
    locked = ToolSighting.objects.select_for_update().get(pk=sighting.pk)
    before = locked.audit_data()
    _sighting_classified(locked, ToolSighting.Status.IGNORED, actor)
    audit_record(
        actor=actor,
        action=CatalogAction.SIGHTING_CLASSIFIED_READONLY,
        target=locked,
        data={"before": before, "after": locked.audit_data()},
    )
    return locked


def _sighting_classified(sighting: ToolSighting, status: str, actor: Actor) -> None:
    sighting.status = status
    sighting.classified_by = actor.name[:150]
    sighting.classified_at = timezone.now()
    sighting.save(update_fields=["status", "classified_by", "classified_at"])
