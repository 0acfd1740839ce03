"""Agents: the AI agents allowed to call the MCP endpoint, and their bearer tokens. The services below are the only
code that creates or changes an agent or a token.
"""

from rewind.agents.services import (
    TOKEN_PREFIX,
    IssuedToken,
    agent_create,
    agent_token_issue,
    agent_token_issue_by_name,
    agent_token_revoke,
    agent_update,
    default_owner,
    expiry_in_days,
    hash_token,
)

__all__ = [
    "TOKEN_PREFIX",
    "IssuedToken",
    "agent_create",
    "agent_token_issue",
    "agent_token_issue_by_name",
    "agent_token_revoke",
    "agent_update",
    "default_owner",
    "expiry_in_days",
    "hash_token",
]
