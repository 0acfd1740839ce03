"""Where Keycloak tokens are kept between calls, so processes need not each log in.

The library ships only ``MemoryTokenStore``; the shared stores (Redis, database, both encrypting the token) are
handed in by whoever builds the client. Keys are ``ZvmConnection.login_key``, never a secret; times are
wall-clock seconds, since other processes read them.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class StoredToken:
    token: str = field(repr=False)
    expires_at: float  # wall-clock seconds
    lifetime: float  # seconds, as the ZVM granted it (sets how early it is renewed)


class TokenStore(Protocol):
    def get(self, key: str) -> StoredToken | None:
        """The stored token, or None. A store that cannot answer says None."""
        ...

    def put(self, key: str, token: StoredToken) -> None:
        """Store ``token`` for ``key`` (replacing any) and end a login claim on ``key``."""
        ...

    def discard(self, key: str, token: str) -> None:
        """Remove ``token`` only if it is still the one stored (another process may have replaced it)."""
        ...

    def claim_login(self, key: str, ttl: float) -> bool:
        """Whether this caller may log in now: True for one caller at a time, for up to ``ttl`` s; the others wait
        for the token it stores. A store that cannot answer says True: a duplicate login beats none."""
        ...

    def release_login(self, key: str) -> None:
        """End this caller's claim early (its login failed)."""
        ...


class MemoryTokenStore:
    """Tokens of this process only; claims always succeed (TokenKeeper's lock serializes threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tokens: dict[str, StoredToken] = {}

    def get(self, key: str) -> StoredToken | None:
        with self._lock:
            return self._tokens.get(key)

    def put(self, key: str, token: StoredToken) -> None:
        with self._lock:
            self._tokens[key] = token

    def discard(self, key: str, token: str) -> None:
        with self._lock:
            stored = self._tokens.get(key)
            if stored is not None and stored.token == token:
                del self._tokens[key]

    def claim_login(self, key: str, ttl: float) -> bool:
        return True

    def release_login(self, key: str) -> None:
        return None
