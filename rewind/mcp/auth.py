"""Bearer-token verification for /mcp over a token store, with a short per-process cache.

The SDK calls ``verify_token`` on every HTTP POST. A cache hit costs a dict lookup; a miss
costs one look-up in the store (one indexed query). The trade-off: a revoked or deactivated
token keeps working in a process for up to MCP_TOKEN_CACHE_S seconds (a token never seen by
that process is refused at once). Expiry is checked on every call, cached or not.

The store is handed in (``rewind.asgi`` gives the agents' one), so this framework names no part.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from django.conf import settings
from django.utils import timezone
from mcp.server.auth.provider import AccessToken

from rewind.mcp.context import run_db

_MAX_ENTRIES = 10_000


@dataclass(frozen=True)
class TokenGrant:
    """What a store knows of a valid token: who holds it and until when."""

    token_pk: int
    client_id: str
    subject: str
    expires_at: datetime | None
    claims: dict[str, Any]


class TokenStore(Protocol):
    # How often, at most, a process tells the store that a cached token was used.
    touch_interval_s: float

    def key(self, token: str) -> str | None:
        """The look-up key of ``token`` (never the token itself); None when it cannot be one of ours."""

    def find(self, key: str) -> TokenGrant | None:
        """The valid token with this key (blocking, database); None when unknown, revoked or expired."""

    def touch(self, token_pk: int) -> None:
        """Note that the token was used (blocking, database)."""

    @property
    def how_to_get_a_token(self) -> str:
        """How a person gets a token: the end of the one sentence a 401 answers with.

        Plain words for a header as well as a body: no double quote, no backslash (RFC 6750).
        """


@dataclass
class _Entry:
    access: AccessToken | None
    token_pk: int | None
    expires_at: datetime | None
    fresh_until: float  # monotonic
    last_used_written: float  # monotonic


def _access(grant: TokenGrant) -> AccessToken:
    return AccessToken(
        token="",  # the SDK does not need the token back; keep it out of memory dumps
        client_id=grant.client_id,
        subject=grant.subject,
        scopes=[],
        expires_at=int(grant.expires_at.timestamp()) if grant.expires_at else None,
        claims=grant.claims,
    )


class CachedTokenVerifier:
    """``mcp.server.auth.provider.TokenVerifier`` over a ``TokenStore``."""

    def __init__(self, store: TokenStore, cache_seconds: float | None = None) -> None:
        self._store = store
        self._cache_seconds = settings.MCP_TOKEN_CACHE_S if cache_seconds is None else cache_seconds
        self._cache: dict[str, _Entry] = {}
        self._lock = threading.Lock()

    async def verify_token(self, token: str) -> AccessToken | None:
        key = self._store.key(token)
        if key is None:
            return None
        now = time.monotonic()
        entry = self._cache.get(key)
        if entry is None or entry.fresh_until <= now:
            grant = await run_db(self._store.find, key)
            if grant is None:
                entry = _Entry(None, None, None, now + self._cache_seconds, now)
            else:
                entry = _Entry(_access(grant), grant.token_pk, grant.expires_at, now + self._cache_seconds, now)
            self._remember(key, entry)
        if entry.access is None:
            return None
        if entry.expires_at is not None and entry.expires_at <= timezone.now():
            return None
        if now - entry.last_used_written >= self._store.touch_interval_s and entry.token_pk is not None:
            entry.last_used_written = now
            await run_db(self._store.touch, entry.token_pk)
        return entry.access

    def _remember(self, key: str, entry: _Entry) -> None:
        if self._cache_seconds <= 0:
            return
        with self._lock:
            if len(self._cache) >= _MAX_ENTRIES:
                self._cache.clear()  # crude but bounded; a flood of bad tokens cannot grow memory
            self._cache[key] = entry

    @property
    def how_to_get_a_token(self) -> str:
        return self._store.how_to_get_a_token
