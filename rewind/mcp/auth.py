"""Bearer-token verification for /mcp, backed by ``AgentToken`` with a short per-process cache.

The SDK calls ``verify_token`` on every HTTP POST. A cache hit costs a dict lookup; a miss
costs one indexed query. The trade-off: a revoked or deactivated token keeps working in a
process for up to MCP_TOKEN_CACHE_S seconds (a token never seen by that process is
refused at once). Expiry is checked on every call, cached or not.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Q
from django.utils import timezone
from mcp.server.auth.provider import AccessToken

from rewind.agents import TOKEN_PREFIX, hash_token
from rewind.mcp.context import run_db
from rewind.models import AgentToken

# last_used_at is for humans ("is this token still in use?"); a minute's precision will do.
LAST_USED_PRECISION = timedelta(minutes=1)
_MAX_ENTRIES = 10_000


@dataclass
class _Entry:
    access: AccessToken | None
    token_pk: int | None
    expires_at: datetime | None
    fresh_until: float  # monotonic
    last_used_written: float  # monotonic


def _lookup(token_hash: str) -> tuple[AccessToken | None, int | None, datetime | None]:
    now = timezone.now()
    row = (
        AgentToken.objects.select_related("agent")
        .filter(token_hash=token_hash, revoked_at__isnull=True, agent__is_active=True)
        .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
        .first()
    )
    if row is None:
        return None, None, None
    if row.last_used_at is None or row.last_used_at < now - LAST_USED_PRECISION:
        _touch(row.pk)
    access = AccessToken(
        token="",  # the SDK does not need the token back; keep it out of memory dumps
        client_id=row.agent.name,
        subject=str(row.agent_id),
        scopes=[],
        expires_at=int(row.expires_at.timestamp()) if row.expires_at else None,
        claims={"agent_id": row.agent_id, "token_prefix": row.prefix},
    )
    return access, row.pk, row.expires_at


def _touch(token_pk: int) -> None:
    now = timezone.now()
    AgentToken.objects.filter(pk=token_pk).filter(
        Q(last_used_at__isnull=True) | Q(last_used_at__lt=now - LAST_USED_PRECISION)
    ).update(last_used_at=now)


class AgentTokenVerifier:
    """``mcp.server.auth.provider.TokenVerifier`` over the ``AgentToken`` table."""

    def __init__(self, cache_seconds: float | None = None) -> None:
        self._cache_seconds = settings.MCP_TOKEN_CACHE_S if cache_seconds is None else cache_seconds
        self._cache: dict[str, _Entry] = {}
        self._lock = threading.Lock()

    async def verify_token(self, token: str) -> AccessToken | None:
        if not token.startswith(TOKEN_PREFIX) or len(token) > 200:
            return None
        key = hash_token(token)
        now = time.monotonic()
        entry = self._cache.get(key)
        if entry is None or entry.fresh_until <= now:
            access, token_pk, expires_at = await run_db(_lookup, key)
            entry = _Entry(access, token_pk, expires_at, now + self._cache_seconds, now)
            self._remember(key, entry)
        if entry.access is None:
            return None
        if entry.expires_at is not None and entry.expires_at <= timezone.now():
            return None
        if now - entry.last_used_written >= LAST_USED_PRECISION.total_seconds() and entry.token_pk is not None:
            entry.last_used_written = now
            await run_db(_touch, entry.token_pk)
        return entry.access

    def _remember(self, key: str, entry: _Entry) -> None:
        if self._cache_seconds <= 0:
            return
        with self._lock:
            if len(self._cache) >= _MAX_ENTRIES:
                self._cache.clear()  # crude but bounded; a flood of bad tokens cannot grow memory
            self._cache[key] = entry

    def forget_all(self) -> None:
        with self._lock:
            self._cache.clear()
