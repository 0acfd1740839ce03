"""Keycloak tokens for one ZVM, shared by every thread using the client.

A token is renewed before it runs out (when less than max(10 s, 20 % of its lifetime)
remains), because ZVM tokens may live only about a minute. The lock makes concurrent
callers wait for one login instead of each logging in.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable

import requests

from .errors import ZvmAuthError, ZvmRejectedError, ZvmUnparseableResponse
from .transport import Transport, one_line, zvm_message

DEFAULT_LIFETIME = 60.0  # seconds, when the token answer has no usable expires_in
_MIN_MARGIN = 10.0
_MARGIN_SHARE = 0.2


class TokenKeeper:
    def __init__(self, transport: Transport, clock: Callable[[], float] = time.monotonic) -> None:
        self._transport = transport
        self._clock = clock
        self._lock = threading.Lock()
        self._token: str | None = None
        self._expires_at = 0.0
        self._lifetime = 0.0

    def token(self, request_id: str) -> str:
        """A token with enough life left, logging in first if needed."""
        with self._lock:
            if self._token is None or self._due():
                self._login(request_id)
            assert self._token is not None
            return self._token

    def discard(self, token: str) -> None:
        """Forget ``token`` (the ZVM refused it) unless another thread already replaced it."""
        with self._lock:
            if self._token == token:
                self._token = None

    def _due(self) -> bool:
        margin = max(_MIN_MARGIN, _MARGIN_SHARE * self._lifetime)
        return self._expires_at - self._clock() < margin

    def _form(self) -> dict[str, str]:
        conn = self._transport.conn
        # scope=openid: required by Zerto's Keycloak for ZIC, harmless for the ZVM.
        form = {"client_id": conn.client_id, "scope": "openid", "grant_type": conn.grant_type}
        if conn.client_secret:
            form["client_secret"] = conn.client_secret
        else:
            form.update(username=conn.username, password=conn.password)
        return form

    def _login(self, request_id: str) -> None:
        t, conn = self._transport, self._transport.conn
        asked_at = self._clock()
        resp = t.send(
            "POST",
            conn.token_url,
            request_id=request_id,
            form=self._form(),
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        if resp.status_code in (400, 401, 403):
            error = self._keycloak_error(resp)
            raise t.error(ZvmAuthError, f"the ZVM rejected the credentials{error}", status=resp.status_code)
        if resp.status_code == 404:
            resp.close()
            # Deliberately not ZvmNotFoundError: nothing is missing but the address is wrong.
            raise t.error(ZvmRejectedError, "no Keycloak token endpoint at this address (HTTP 404); "
                          "check the base URL", status=404)
        if resp.status_code != 200:
            raise t.error_for_status(resp, "the login")
        self._accept(resp.content, asked_at)

    def _keycloak_error(self, resp: requests.Response) -> str:
        said = zvm_message(resp)
        return f" ({self._transport.redact(one_line(said, 120))})" if said else ""

    def _accept(self, content: bytes, asked_at: float) -> None:
        try:
            body = json.loads(content)
        except ValueError:
            body = None
        token = body.get("access_token") if isinstance(body, dict) else None
        if not isinstance(token, str) or not token:
            raise self._transport.error(ZvmUnparseableResponse, "the login answer holds no access token")
        lifetime = body.get("expires_in")
        if isinstance(lifetime, bool) or not isinstance(lifetime, (int, float)) or lifetime <= 0:
            lifetime = DEFAULT_LIFETIME
        self._transport.remember_secret(token)
        self._token = token
        self._lifetime = float(lifetime)
        # Counted from when we asked, not when the answer arrived: errs on the early side.
        self._expires_at = asked_at + float(lifetime)
