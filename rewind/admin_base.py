"""Shared admin building blocks."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from rewind.actors import Actor


def actor_for(request: HttpRequest) -> Actor:
    """The signed-in person, as the actor of what an admin action changes."""
    return Actor.user(request.user.get_username())


class ReadOnlyAdmin(admin.ModelAdmin):
    """Records of what happened (audit, guards, sightings, sessions): shown, never edited by hand.

    State changes go through admin actions and custom views that call the services.
    """

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False
