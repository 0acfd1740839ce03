"""What createagent and mcpconfig share: finding the owner, issuing the token, reporting it. Not a command: Django
skips command modules whose names start with an underscore.
"""

from __future__ import annotations

from django.core.management.base import CommandError, OutputWrapper

from rewind.agents import agent_token_issue_by_name, expiry_in_days
from rewind.agents.selectors import agent_owner_candidate
from rewind.agents.services import AgentWithToken
from rewind.audit import Actor
from rewind.lib.errors import ApplicationError
from rewind.mcp import scopes


def issue_agent_token(
    *,
    command: str,
    name: str,
    owner_name: str | None,
    label: str,
    expires_days: int | None,
    stderr: OutputWrapper,
    granted: tuple[str, ...] = scopes.ALL,
    replace: bool = False,
) -> AgentWithToken:
    """A new token for agent ``name`` (created when missing); a CommandError says what was wrong.
    ``replace``: the agent's live tokens of the same ``label`` are revoked (and said so)."""
    owner = None
    if owner_name:
        owner = agent_owner_candidate(owner_name)
        if owner is None:
            raise CommandError(f"no user named {owner_name!r}")
    try:
        made = agent_token_issue_by_name(
            actor=Actor.system(f"manage.py {command}"),
            name=name,
            owner=owner,
            label=label,
            expires_at=expiry_in_days(expires_days),
            granted=granted,
            replace=replace,
        )
    except ApplicationError as exc:
        raise CommandError(exc.message) from None
    if made.created:
        stderr.write(f"created agent {made.agent.name} (owner {made.agent.owner.get_username()})")
    for old in made.replaced:
        stderr.write(
            f"revoked token {old.prefix}… ({label}, issued {old.created_at:%Y-%m-%d %H:%M} UTC): this one replaces it"
        )
    return made
