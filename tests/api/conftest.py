"""A CSRF-enforcing client for the operators' REST API (the personas come from tests.fixtures)."""

from __future__ import annotations

import json
import secrets
import string
from collections.abc import Callable
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client


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


@pytest.fixture
def api() -> Callable[[User | None], Api]:
    return Api
