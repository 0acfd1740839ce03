"""Keycloak stand-in: the realm 'zerto' token endpoint and Bearer checks, one realm per site
(a token from one site's ZVM is no good at another's)."""

from __future__ import annotations

import base64
import json
import secrets
from dataclasses import dataclass
from typing import Any

USERNAME = "admin"
# Distinctive on purpose: the suite scans logs, audit rows, responses and the database for it (tests/secretscan.py).
# Longer than 20 characters on purpose too: Hypothesis feeds the fuzz tests string constants of at most
# 20 characters found in the project's modules, and an agent's input holding it is audited as sent.
PASSWORD = "zvmsim-Passw0rd-7c1e-4b9d"
PASSWORD_CLIENT_ID = "zerto-client"
TOKEN_MARK = "zvmsimTok"
SERVICE_CLIENT_ID = "rewind"
SERVICE_CLIENT_SECRET = "rewind-secret"


class TokenError(Exception):
    def __init__(self, status: int, error: str, description: str) -> None:
        super().__init__(description)
        self.status = status
        self.body = {"error": error, "error_description": description}


@dataclass
class Grant:
    site: str
    subject: str
    expires_at: float


def _b64(data: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


def _jwt(claims: dict[str, Any]) -> str:
    # Shaped like a Keycloak JWT so clients that peek at it do not choke; never verified. The
    # signature part starts with TOKEN_MARK, so a leaked token is found wherever it lands.
    return f"{_b64({'alg': 'RS256', 'typ': 'JWT'})}.{_b64(claims)}.{TOKEN_MARK}{secrets.token_urlsafe(24)}"


def _check_credentials(form: dict[str, str]) -> str:
    """Validate a token request; returns the subject or raises TokenError."""
    grant = form.get("grant_type", "")
    client_id = form.get("client_id", "")
    if grant == "password":
        if client_id != PASSWORD_CLIENT_ID:
            raise TokenError(401, "invalid_client", "Invalid client or Invalid client credentials")
        if form.get("username") != USERNAME or form.get("password") != PASSWORD:
            raise TokenError(401, "invalid_grant", "Invalid user credentials")
        return USERNAME
    if grant == "client_credentials":
        if client_id != SERVICE_CLIENT_ID or form.get("client_secret") != SERVICE_CLIENT_SECRET:
            raise TokenError(401, "invalid_client", "Invalid client or Invalid client credentials")
        return f"service-account-{client_id}"
    if grant == "refresh_token":
        raise TokenError(400, "invalid_grant", "Invalid refresh token")  # replaced by caller
    if not grant:
        raise TokenError(400, "invalid_request", "Missing form parameter: grant_type")
    raise TokenError(400, "unsupported_grant_type", "Unsupported grant_type")


class Tokens:
    def __init__(self) -> None:
        self._access: dict[str, Grant] = {}
        self._refresh: dict[str, Grant] = {}

    def issue(self, site: str, form: dict[str, str], now: float, ttl: float) -> dict[str, Any]:
        if form.get("grant_type") == "refresh_token":
            old = self._refresh.pop(form.get("refresh_token", ""), None)
            if old is None or old.site != site or old.expires_at <= now:
                raise TokenError(400, "invalid_grant", "Invalid refresh token")
            subject = old.subject
        else:
            subject = _check_credentials(form)
        self._prune(now)
        session_state = secrets.token_hex(16)
        claims = {
            "exp": int(now + ttl),
            "iat": int(now),
            "iss": f"/{site}/auth/realms/zerto",
            "sub": subject,
            "azp": form.get("client_id", ""),
            "session_state": session_state,
            "preferred_username": subject,
            "jti": secrets.token_hex(8),
        }
        access, refresh = _jwt(claims), _jwt({**claims, "typ": "Refresh"})
        self._access[access] = Grant(site, subject, now + ttl)
        self._refresh[refresh] = Grant(site, subject, now + 30 * 60)
        return {
            "access_token": access,
            "expires_in": int(ttl),
            "refresh_expires_in": 1800,
            "refresh_token": refresh,
            "token_type": "Bearer",
            "not-before-policy": 0,
            "session_state": session_state,
            "scope": "profile email",
        }

    def _prune(self, now: float) -> None:
        # Clients that log in often (short TTLs, benchmarks) must not grow the tables forever.
        if len(self._access) + len(self._refresh) < 10_000:
            return
        for table in (self._access, self._refresh):
            for token in [t for t, g in table.items() if g.expires_at <= now]:
                del table[token]

    def valid(self, site: str, authorization: str | None, now: float) -> bool:
        if not authorization:
            return False
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer":
            return False
        grant = self._access.get(token.strip())
        if grant is None or grant.site != site:
            return False
        if grant.expires_at <= now:
            del self._access[token.strip()]
            return False
        return True

    def drop(self, site: str | None = None) -> None:
        """Invalidate every token (of one site, or of all)."""
        for table in (self._access, self._refresh):
            for token in [t for t, g in table.items() if site is None or g.site == site]:
                del table[token]
