"""Numbers that link to the admin list of exactly what they count."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import urlencode

from django.db.models import Model
from django.urls import reverse


@dataclass(frozen=True)
class Count:
    value: int
    url: str
    tone: str = ""  # a badge tone ("bad", "attention") for a number that is bad news when above 0


def changelist_url(model: type[Model], **filters: str | int) -> str:
    """The admin list of ``model`` with ``filters`` as its query string (``status__exact="failed"``)."""
    url = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")
    return f"{url}?{urlencode(filters)}" if filters else url


def change_url(obj: Model) -> str:
    return reverse(f"admin:{obj._meta.app_label}_{obj._meta.model_name}_change", args=[obj.pk])


def at(value: datetime) -> str:
    """A time as a list filter value: ISO 8601 with its offset, exact to the microsecond, so a
    list filtered ``__gte`` this time shows the same rows the selector counted."""
    return value.astimezone(UTC).isoformat()


def count(value: int, model: type[Model], *, tone: str = "", **filters: str | int) -> Count:
    return Count(value, changelist_url(model, **filters), tone if value else "")
