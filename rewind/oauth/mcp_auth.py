"""OAuth access tokens as a token store of the MCP endpoint (``rewind.mcp.auth.TokenStore``).

A token acts as the agent of its (person, client) pair's live grant. Not cached: revoking a grant, or
deactivating its agent, refuses the next request at once.
"""

from __future__ import annotations

import hashlib

from rewind.agents.limits import CLAIM, VmLimit
from rewind.agents.services import TOKEN_PREFIX
from rewind.mcp import scopes
from rewind.mcp.auth import TokenGrant
from rewind.oauth.selectors import access_token_live, live_grant

# Longer than any token django-oauth-toolkit issues; a longer bearer is refused without a query.
_MAX_TOKEN_LENGTH = 255


class OAuthTokenStore:
    touch_interval_s = float("inf")  # django-oauth-toolkit keeps no "last used"
    cache_seconds: float | None = 0.0

    def key(self, token: str) -> str | None:
        if token.startswith(TOKEN_PREFIX) or not token or len(token) > _MAX_TOKEN_LENGTH:
            return None
        return hashlib.sha256(token.encode("utf-8")).hexdigest()

    def find(self, key: str) -> TokenGrant | None:
        token = access_token_live(checksum=key)
        if token is None or token.user_id is None or token.application_id is None:
            return None
        grant = live_grant(user_id=token.user_id, application_id=token.application_id)
        if grant is None:
            return None
        resources = token.resource or []
        return TokenGrant(
            token_pk=token.pk,
            client_id=grant.agent.name,
            subject=str(grant.agent_id),
            expires_at=token.expires,
            claims={"agent_id": grant.agent_id, "oauth_grant": grant.pk, CLAIM: VmLimit.of(grant.agent).as_claim()},
            # The person granted these; a token narrowed to fewer at the token endpoint holds fewer.
            scopes=tuple(s for s in scopes.parse(token.scope) if s in grant.scope.split()),
            # Never None for a token of ours (every one is bound); "" cannot match any request.
            resource=resources[0] if len(resources) == 1 else "",
        )

    def touch(self, token_pk: int) -> None:
        return None

    @property
    def how_to_get_a_token(self) -> str:
        return "see the agents' page of the admin"
