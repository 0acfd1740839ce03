"""Bearer-token verification for /mcp over token stores, with a short per-process cache.

The guard in front of the SDK and the SDK behind it both verify every POST's token; the second gets the first's
answer. The trade-off of the cache: a revoked token keeps working in a process for up to the store's cache time
(MCP_TOKEN_CACHE_S for pasted agent tokens; OAuth tokens are not cached, so revoking a grant ends them at once).
Expiry is checked on every call. The stores are handed in, so this framework names no part.
"""

from __future__ import annotations

import contextvars
import hmac
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from django.conf import settings
from django.utils import timezone
from mcp.server.auth.provider import AccessToken

from rewind.mcp.context import run_quick

_MAX_ENTRIES = 10_000


@dataclass(frozen=True)
class TokenGrant:
    """What a store knows of a valid token: who holds it and until when."""

    token_pk: int
    client_id: str  # the agent's name: what tags and audit rows carry
    subject: str  # the agent's primary key
    expires_at: datetime | None
    claims: dict[str, Any]
    scopes: tuple[str, ...]  # rewind.mcp.scopes
    resource: str | None = None  # the resource (RFC 8707) an OAuth token was issued for; None: any of ours


class TokenStore(Protocol):
    # How often, at most, a process tells the store that a cached token was used.
    touch_interval_s: float
    # How long a process may answer from its cache (None: MCP_TOKEN_CACHE_S); 0 asks the store every time.
    cache_seconds: float | None

    def key(self, token: str) -> str | None:
        """The look-up key of ``token`` (never the token itself); None when it cannot be one of ours."""

    def find(self, key: str) -> TokenGrant | None:
        """The valid token with this key (blocking, database); None when unknown, revoked or expired."""

    def touch(self, token_pk: int) -> None:
        """Note that the token was used (blocking, database)."""

    @property
    def how_to_get_a_token(self) -> str:
        """How a person gets a token: the end of the one sentence a 401 answers with, plain words for a header as
        well as a body (no double quote, no backslash: RFC 6750)."""


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
        scopes=list(grant.scopes),
        expires_at=int(grant.expires_at.timestamp()) if grant.expires_at else None,
        resource=grant.resource,
        claims=grant.claims,
    )


# This request's verified token and its answer: the SDK verifies again behind the guard.
_verified: contextvars.ContextVar[tuple[str, AccessToken | None] | None] = contextvars.ContextVar(
    "rewind_mcp_verified", default=None
)


class CachedTokenVerifier:
    """``mcp.server.auth.provider.TokenVerifier`` over ``TokenStore``s: the first whose ``key`` takes a token answers."""

    def __init__(self, stores: Sequence[TokenStore], cache_seconds: float | None = None) -> None:
        if not stores:
            raise ValueError("a verifier needs at least one token store")
        self._stores = list(stores)
        default = settings.MCP_TOKEN_CACHE_S if cache_seconds is None else cache_seconds
        self._cache_seconds = [default if s.cache_seconds is None else s.cache_seconds for s in self._stores]
        self._cache: dict[tuple[int, str], _Entry] = {}
        self._lock = threading.Lock()

    async def verify_token(self, token: str) -> AccessToken | None:
        """The SDK's check: the guard's answer for this request when it verified the same token."""
        seen = _verified.get()
        if seen is not None and hmac.compare_digest(seen[0], token):
            return seen[1]
        return await self._verify(token)

    async def verify_request_token(self, token: str) -> AccessToken | None:
        """The guard's check, at the start of a request: kept for the SDK's ``verify_token`` behind it."""
        access = await self._verify(token)
        _verified.set((token, access))
        return access

    async def _verify(self, token: str) -> AccessToken | None:
        for index, store in enumerate(self._stores):
            key = store.key(token)
            if key is not None:
                return await self._verify_in(index, store, key)
        return None

    async def _verify_in(self, index: int, store: TokenStore, key: str) -> AccessToken | None:
        now = time.monotonic()
        cache_seconds = self._cache_seconds[index]
        entry = self._cache.get((index, key))
        if entry is None or entry.fresh_until <= now:
            grant = await run_quick(store.find, key)
            if grant is None:
                entry = _Entry(None, None, None, now + cache_seconds, now)
            else:
                entry = _Entry(_access(grant), grant.token_pk, grant.expires_at, now + cache_seconds, now)
            if cache_seconds > 0:
                self._remember((index, key), entry)
        if entry.access is None:
            return None
        if entry.expires_at is not None and entry.expires_at <= timezone.now():
            return None
        if now - entry.last_used_written >= store.touch_interval_s and entry.token_pk is not None:
            entry.last_used_written = now
            await run_quick(store.touch, entry.token_pk)
        return entry.access

    def _remember(self, key: tuple[int, str], entry: _Entry) -> None:
        with self._lock:
            if len(self._cache) >= _MAX_ENTRIES:
                self._cache.clear()  # crude but bounded; a flood of bad tokens cannot grow memory
            self._cache[key] = entry

    @property
    def how_to_get_a_token(self) -> str:
        return self._stores[0].how_to_get_a_token
