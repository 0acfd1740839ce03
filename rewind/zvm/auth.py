"""Keycloak tokens for one ZVM, shared by every thread using the client, and through a ``TokenStore`` by every
process handed the same store.

ZVM tokens may live only about a minute, so one is renewed while max(10 s, 20 % of its lifetime) remains. A lock
makes threads wait for one login, the store's login claim does the same for processes, and each process keeps
its own copy, reading the store only when that copy is due or was refused.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable

import requests

from .errors import ZvmAuthError, ZvmRejectedError, ZvmUnparseableResponse
from .tokenstore import MemoryTokenStore, StoredToken, TokenStore
from .transport import Transport, one_line, zvm_message

DEFAULT_LIFETIME = 60.0  # seconds, when the token answer has no usable expires_in
_MIN_MARGIN = 10.0
_MARGIN_SHARE = 0.2
# How long one process may hold the right to log in while the others wait for its token:
# about one login's worth of time. Past it another process logs in (the first one hung).
LOGIN_CLAIM_S = 10.0
_CLAIM_POLL_S = 0.05


class TokenKeeper:
    def __init__(
        self,
        transport: Transport,
        store: TokenStore | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._transport = transport
        self._store: TokenStore = store if store is not None else MemoryTokenStore()
        self._key = transport.conn.login_key
        # Wall clock, not monotonic: expiry times are shared with other processes.
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._current: StoredToken | None = None

    def token(self, request_id: str) -> str:
        """A token with enough life left: this process's copy, the store's, or a new login."""
        with self._lock:
            if self._current is None or self._due(self._current):
                self._current = self._shared_or_login(request_id)
            return self._current.token

    def discard(self, token: str) -> None:
        """Forget ``token`` (the ZVM refused it) here and in the store, unless it was replaced already."""
        with self._lock:
            if self._current is not None and self._current.token == token:
                self._current = None
        self._store.discard(self._key, token)

    def _due(self, held: StoredToken) -> bool:
        margin = max(_MIN_MARGIN, _MARGIN_SHARE * held.lifetime)
        return held.expires_at - self._clock() < margin

    def _shared_or_login(self, request_id: str) -> StoredToken:
        give_up_waiting = self._clock() + LOGIN_CLAIM_S
        while True:
            stored = self._store.get(self._key)
            if stored is not None and not self._due(stored):
                self._transport.remember_secret(stored.token)
                return stored
            # One process logs in; the others poll the store for its token.
            if self._store.claim_login(self._key, LOGIN_CLAIM_S):
                # Another process may have stored its token and ended its claim since we looked.
                stored = self._store.get(self._key)
                if stored is not None and not self._due(stored):
                    self._store.release_login(self._key)
                    self._transport.remember_secret(stored.token)
                    return stored
                return self._login_and_share(request_id)
            if self._clock() >= give_up_waiting:
                return self._login_and_share(request_id)
            self._sleep(_CLAIM_POLL_S)

    def _login_and_share(self, request_id: str) -> StoredToken:
        try:
            fresh = self._login(request_id)
        except BaseException:
            self._store.release_login(self._key)
            raise
        self._store.put(self._key, fresh)
        return fresh

    def _form(self) -> dict[str, str]:
        conn = self._transport.conn
        # scope=openid: required by Zerto's Keycloak for ZIC, harmless for the ZVM.
        form = {"client_id": conn.client_id, "scope": "openid", "grant_type": conn.grant_type}
        if conn.client_secret:
            form["client_secret"] = conn.client_secret
        else:
            form.update(username=conn.username, password=conn.password)
        return form

    def _login(self, request_id: str) -> StoredToken:
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
            raise t.error(
                ZvmRejectedError,
                "no Keycloak token endpoint at this address (HTTP 404); check the base URL",
                status=404,
            )
        if resp.status_code != 200:
            raise t.error_for_status(resp, "the login")
        return self._accept(resp.content, asked_at)

    def _keycloak_error(self, resp: requests.Response) -> str:
        said = zvm_message(resp)
        return f" ({self._transport.redact(one_line(said, 120))})" if said else ""

    def _accept(self, content: bytes, asked_at: float) -> StoredToken:
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
        # Counted from when we asked, not when the answer arrived: errs on the early side.
        return StoredToken(token=token, expires_at=asked_at + float(lifetime), lifetime=float(lifetime))
