"""Shared admin building blocks."""

from __future__ import annotations

from collections.abc import Callable

from django.contrib import admin
from django.db.models import Model
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString

from rewind.lib.actors import Actor

# How each status word looks, wherever it is shown (lists, pages, the dashboard): one CSS class
# per tone, styled in rewind/static/rewind/admin.css. A word not listed is shown plain ("muted").
BADGE_TONES: dict[str, str] = {
    # done, healthy
    "ok": "good",
    "listed": "good",
    "succeeded": "good",
    "available": "good",
    "closed": "good",
    "valid": "good",
    "verified": "good",
    "forwarded": "good",
    "alive": "good",
    # under way: nobody needs to act yet
    "running": "busy",
    "approved": "busy",
    "inserting": "busy",
    "waiting": "busy",
    "guarding": "busy",
    "releasing": "busy",
    "mounting": "busy",
    "mounted": "busy",
    "unmounting": "busy",
    # a person should look
    "pending": "attention",
    "unknown": "attention",
    "stale": "attention",
    "never": "attention",
    "foreign": "attention",
    # failed, or at risk
    "failed": "bad",
    "stopped": "bad",
    "refused": "bad",
    "timed_out": "bad",
    "unmount_failed": "bad",
    "unavailable": "bad",
    "open": "bad",
    "broken": "bad",
    "error": "bad",
    # over, nothing to do
    "ended": "muted",
    "denied": "muted",
    "expired": "muted",
    "disabled": "muted",
    "none": "muted",
}


def status_badge(status: str, label: str | None = None) -> SafeString:
    """``status`` as a badge, the same markup and colours in every list and page; ``label`` replaces the
    shown text (the tone still comes from ``status``)."""
    tone = BADGE_TONES.get(status, "muted")
    text = label if label is not None else status.replace("_", " ")
    return format_html('<span class="rw-badge rw-badge-{}" data-status="{}">{}</span>', tone, status, text)


def status_column(field: str = "status", description: str = "status") -> Callable[[Model], SafeString]:
    """A list column showing ``field`` as a badge, sortable by the field: ``list_display = [status_column()]``."""

    @admin.display(description=description, ordering=field)
    def status(obj: Model) -> SafeString:
        return status_badge(str(getattr(obj, field)))

    return status


def show_saved(obj: Model, saved: Model) -> None:
    """Give the admin's own instance the values of ``saved``, the row a service wrote: the admin names
    its form's instance in its message and log entry, so that must show what was stored."""
    for f in saved._meta.concrete_fields:
        setattr(obj, f.attname, getattr(saved, f.attname))
    obj._state.db = saved._state.db


def actor_for(request: HttpRequest) -> Actor:
    """The signed-in person, as the actor of what an admin action changes."""
    return Actor.user(request.user.get_username())


class ReadOnlyAdmin(admin.ModelAdmin):
    """Records of what happened (audit, guards, sightings, sessions): shown, never edited by hand; state
    changes go through admin actions that call the services."""

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False
