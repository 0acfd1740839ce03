"""Catalog reads for the REST API and the admin: querysets only, no state changes."""

from __future__ import annotations

from django.db.models import QuerySet

from catalog.models import MutatingTool, ToolSighting
from rewind.lib.errors import NotFoundError


def mutating_tool_queryset(*, enabled: bool | None = None, platform: str | None = None) -> QuerySet[MutatingTool]:
    qs = MutatingTool.objects.all()
    if enabled is not None:
        qs = qs.filter(enabled=enabled)
    if platform:
        qs = qs.filter(platform=platform)
    return qs.order_by("pattern")


def mutating_tool_get(pk: int) -> MutatingTool:
    tool = MutatingTool.objects.filter(pk=pk).first()
    if tool is None:
        raise NotFoundError(f"there is no catalog entry #{pk}")
    return tool


def mutating_tool_pattern_taken(pattern: str) -> bool:
    """Whether an entry has ``pattern`` (normalized) already: the form says so before the service refuses it."""
    return MutatingTool.objects.filter(pattern=pattern).exists()


def tool_sighting_queryset(*, status: str | None = None) -> QuerySet[ToolSighting]:
    qs = ToolSighting.objects.all()
    if status:
        qs = qs.filter(status=status)
    return qs.order_by("-last_seen_at", "-pk")


def tool_sighting_get(pk: int) -> ToolSighting:
    sighting = ToolSighting.objects.filter(pk=pk).first()
    if sighting is None:
        raise NotFoundError(f"there is no tool sighting #{pk}")
    return sighting
