"""Who may call an operator endpoint: a signed-in staff person holding the view's model permission.

Views declare ``required_permissions = {"GET": "app.view_x", "POST": "app.add_x", ...}``; a
method missing from the map is refused. Staff is required as for the admin and the recovery
API: the REST API is the admin's twin, not a second door for other accounts.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework import permissions
from rest_framework.request import Request

from rewind.lib.actors import Actor


class HasModelPermission(permissions.BasePermission):
    message = "you lack the permission for this"

    def has_permission(self, request: Request, view: Any) -> bool:
        user = request.user
        if not (user and user.is_authenticated and getattr(user, "is_staff", False)):
            return False
        needed: dict[str, str] = getattr(view, "required_permissions", {})
        method = "GET" if request.method in ("HEAD", "OPTIONS") else (request.method or "")
        if not hasattr(view, method.lower()):
            return True  # no handler: the view answers 405, which tells more than a 403
        perm = needed.get(method)
        if perm is None:
            return False
        self.message = f"you lack the permission {perm}"
        return bool(user.has_perm(perm))

    def describe(self, view: Any, method: str) -> str:
        """Who may call ``method`` on ``view``, for the API's schema."""
        perm = getattr(view, "required_permissions", {}).get("GET" if method in ("HEAD", "OPTIONS") else method)
        return f"a signed-in staff user holding `{perm}`." if perm else "nobody."


class ApiDocsPermission(permissions.BasePermission):
    """The schema and docs pages (``rewind.lib.rest.docs``): signed in, unless REWIND_API_DOCS_PUBLIC.

    Read at request time: drf-spectacular reads its SERVE_PERMISSIONS once, at import."""

    def has_permission(self, request: Request, view: Any) -> bool:
        return bool(settings.REWIND_API_DOCS_PUBLIC or (request.user and request.user.is_authenticated))


def actor_of(request: Request) -> Actor:
    """The audit actor for a person's call."""
    return Actor.user(request.user.get_username())


def request_id_of(request: Request) -> str | None:
    """The request id the middleware minted or accepted (echoed as X-Request-ID)."""
    return getattr(request, "id", None)
