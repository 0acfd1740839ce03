"""Agents' bearer tokens as the MCP endpoint's token store (``rewind.mcp.auth.TokenStore``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.urls import reverse
from django.utils import timezone

from rewind.agents.limits import CLAIM, VmLimit
from rewind.agents.selectors import agent_token_active, agent_token_still_active, credentials_version
from rewind.agents.services import LAST_USED_PRECISION, TOKEN_PREFIX, agent_token_touch, hash_token
from rewind.mcp import scopes
from rewind.mcp.auth import TokenGrant

# Longer than any token we issue; a longer bearer is refused without a hash or a query.
_MAX_TOKEN_LENGTH = 200
# Claims of a verified agent token: the credentials version it was verified under, and its row.
VERSION_CLAIM, TOKEN_CLAIM = "credentials_version", "token_pk"


class AgentTokenStore:
    touch_interval_s = LAST_USED_PRECISION.total_seconds()
    cache_seconds: float | None = None  # MCP_TOKEN_CACHE_S

    def key(self, token: str) -> str | None:
        if not token.startswith(TOKEN_PREFIX) or len(token) > _MAX_TOKEN_LENGTH:
            return None
        return hash_token(token)

    def find(self, key: str) -> TokenGrant | None:
        version = credentials_version()  # before the row: a change in between is seen as one after
        row = agent_token_active(token_hash=key)
        if row is None:
            return None
        if row.last_used_at is None or row.last_used_at < timezone.now() - LAST_USED_PRECISION:
            agent_token_touch(token_pk=row.pk)
        return TokenGrant(
            token_pk=row.pk,
            client_id=row.agent.name,
            subject=str(row.agent_id),
            expires_at=row.expires_at,
            claims={
                "agent_id": row.agent_id,
                "token_prefix": row.prefix,
                CLAIM: VmLimit.of(row.agent).as_claim(),
                VERSION_CLAIM: version,
                TOKEN_CLAIM: row.pk,
            },
            scopes=scopes.parse(row.scope),
        )

    def touch(self, token_pk: int) -> None:
        agent_token_touch(token_pk=token_pk)

    @property
    def how_to_get_a_token(self) -> str:
        # A path, not a URL: whoever reads it already has the address of this service.
        agents = reverse("admin:rewind_agent_changelist")
        return (
            "get one with manage.py mcpconfig AGENT --client CLIENT on the server, or in the admin "
            f"({agents}, open the agent, then Connect an agent), and send it as Authorization: Bearer TOKEN"
        )


def agent_token_current(claims: Mapping[str, Any], version: int) -> bool:
    """Whether the calling token may still be used, given the credentials version read just now: no query while
    nothing changed since it was verified, else its row is read again. A token of another store carries no
    version: nothing to check here."""
    seen = claims.get(VERSION_CLAIM)
    if seen is None or seen == version:
        return True
    return agent_token_still_active(token_pk=int(claims[TOKEN_CLAIM]))
