"""What a token may do: the scopes of /mcp, for OAuth grants and pasted agent tokens alike.

Each tool declares the one scope it needs; a call outside the token's scopes is refused with 403
``insufficient_scope`` naming it. A pasted token issued before scopes existed holds every scope. Plain strings
and no Django, so the settings can name them too.
"""

from __future__ import annotations

READ = "rewind:read"
GUARD = "rewind:guard"
RECOVER = "rewind:recover"
SESSIONS = "rewind:sessions"
CATALOG = "rewind:catalog"

# What a person sees on the consent page and the admin, by scope.
DESCRIPTIONS: dict[str, str] = {
    READ: "Find VMs and their VPGs, read guards, recoveries, FLR sessions and the catalog",
    GUARD: "Insert tagged checkpoints (guards), and make gateway calls that need a guard",
    RECOVER: "Ask for files back from checkpoints (a person still approves each)",
    SESSIONS: "End FLR sessions this service opened",
    CATALOG: "Add entries to the mutating-tool catalog",
}
ALL: tuple[str, ...] = tuple(DESCRIPTIONS)


def parse(text: str) -> tuple[str, ...]:
    """The known scopes named in a space-separated ``text``, in the order of ``ALL``."""
    named = set(text.split())
    return tuple(scope for scope in ALL if scope in named)


# A tool says which scope it needs in its _meta, which clients see in tools/list as well.
META_KEY = "zerto-rewind/scope"


def tool_meta(scope: str) -> dict[str, str]:
    """``meta=`` of ``server.tool(...)`` for a tool that needs ``scope``."""
    if scope not in DESCRIPTIONS:
        raise ValueError(f"unknown scope {scope!r}")
    return {META_KEY: scope}


class InsufficientScopeError(Exception):
    """The token lacks the scope a call needs (RFC 6750 ``insufficient_scope``)."""

    def __init__(self, needed: str, what: str) -> None:
        super().__init__(f"insufficient_scope: {what} needs the scope {needed}, which this token was not granted")
        self.needed = needed
