"""Reads of sites (database only; nothing here asks a ZVM)."""

from __future__ import annotations

from django.db.models import QuerySet

from rewind.lib.errors import NotFoundError
from rewind.sites.models import Site


def site_list() -> QuerySet[Site]:
    return Site.objects.order_by("name")


def site_get(pk: int) -> Site:
    site = Site.objects.filter(pk=pk).first()
    if site is None:
        raise NotFoundError(f"there is no site #{pk}")
    return site


def site_enabled_list() -> QuerySet[Site]:
    return Site.objects.filter(enabled=True).order_by("name")


def site_get_by_name(name: str) -> Site:
    site = Site.objects.filter(name=name).first()
    if site is None:
        raise NotFoundError(f"no site named {name!r}")
    return site


def site_name_taken(name: str, *, other_than: Site | None = None) -> bool:
    """Whether another site already has ``name`` (``other_than``: the site being edited)."""
    others = Site.objects.filter(name=name.strip())
    if other_than is not None:
        others = others.exclude(pk=other_than.pk)
    return others.exists()
