"""Personas and a CSRF-enforcing client for the operators' REST API."""

from __future__ import annotations

import json
import secrets
import string
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import Permission, User
from django.test import Client

VIEW_PERMS = [
    ("rewind", "view_auditevent"),
    ("rewind", "view_site"),
    ("rewind", "view_changeguard"),
    ("rewind", "view_agent"),
    ("catalog", "view_mutatingtool"),
    ("catalog", "view_toolsighting"),
]


class Api:
    """A signed-in browser: session cookie plus the CSRF cookie/header pair a page would send."""

    def __init__(self, user: User | None) -> None:
        self.client = Client(enforce_csrf_checks=True)
        if user is not None:
            self.client.force_login(user)
        self.csrf = "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(32))
        self.client.cookies[settings.CSRF_COOKIE_NAME] = self.csrf

    def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        return self.client.get(path, params or {})

    def _send(self, method: str, path: str, body: Any, *, csrf: bool) -> Any:
        headers = {"X-CSRFToken": self.csrf} if csrf else {}
        send = getattr(self.client, method)
        return send(
            path, data=json.dumps(body if body is not None else {}), content_type="application/json", headers=headers
        )

    def post(self, path: str, body: Any = None, *, csrf: bool = True) -> Any:
        return self._send("post", path, body, csrf=csrf)

    def patch(self, path: str, body: Any = None) -> Any:
        return self._send("patch", path, body, csrf=True)

    def put(self, path: str, body: Any = None) -> Any:
        return self._send("put", path, body, csrf=True)


def _user(name: str, *, staff: bool = True, superuser: bool = False, perms: Sequence[tuple[str, str]] = ()) -> User:
    user = User.objects.create_user(
        name, f"{name}@example.com", f"pw-{name}-123", is_staff=staff, is_superuser=superuser
    )
    for app, codename in perms:
        user.user_permissions.add(Permission.objects.get(content_type__app_label=app, codename=codename))
    return User.objects.get(pk=user.pk)  # drop the permission cache


@pytest.fixture
def outsider(db: None) -> User:
    """Signed in, not staff, no permission."""
    return _user("mallory", staff=False)


@pytest.fixture
def staff_no_perms(db: None) -> User:
    return _user("sam", staff=True)


@pytest.fixture
def viewer(db: None) -> User:
    """Staff with every view permission of the API and nothing else."""
    return _user("vera", perms=VIEW_PERMS)


@pytest.fixture
def superuser(db: None) -> User:
    return _user("root", superuser=True)


@pytest.fixture
def api() -> Callable[[User | None], Api]:
    return Api
