"""Agent identities: services that create agents and issue or revoke their bearer tokens.

A token is ``rwd_`` + 256 random bits; only its SHA-256 is stored (unsalted is enough for a random 256-bit
value, and allows an indexed lookup). The token is returned once, and never logged or audited.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.core.validators import validate_slug
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from rewind.agents.limits import FIELDS as LIMIT_FIELDS
from rewind.agents.limits import lines
from rewind.agents.models import Agent, AgentToken, CredentialsVersion
from rewind.audit import Actor, audit_record
from rewind.audit.actions import AgentAction
from rewind.lib.errors import ApplicationError, NotFoundError
from rewind.mcp import scopes
from rewind.policy.services import policy_version_raise

TOKEN_PREFIX = "rwd_"
# Enough of the token to tell tokens apart in the admin, far too little to guess the rest.
DISPLAY_PREFIX_LENGTH = 10
# last_used_at is for people ("is this token still in use?"); a minute's precision will do.
LAST_USED_PRECISION = timedelta(minutes=1)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


@transaction.atomic
def agent_create(
    *, actor: Actor, name: str, owner: User, description: str = "", request_id: str | None = None
) -> Agent:
    """Create an agent. Raises ``ApplicationError`` for a bad or taken name."""
    name = name.strip()
    try:
        validate_slug(name)
    except ValidationError:
        raise ApplicationError("an agent name may hold only letters, digits, - and _") from None
    if len(name) > 64:
        raise ApplicationError("an agent name is at most 64 characters")
    if Agent.objects.filter(name=name).exists():
        raise ApplicationError(f"an agent named {name!r} already exists")
    agent = Agent.objects.create(name=name, owner=owner, description=description)
    audit_record(
        actor=actor,
        action=AgentAction.CREATED,
        target=agent,
        data={"name": name, "owner": owner.get_username(), "description": description},
        request_id=request_id,
    )
    return agent


_LIMIT_FIELDS = LIMIT_FIELDS
_AGENT_FIELDS = ("owner", "is_active", "description", "changes_need_approval", *_LIMIT_FIELDS)


def _clean_limit(field: str, value: object) -> str:
    entries = lines(str(value or ""))
    for entry in entries:
        if len(entry) > 255 or any(c in entry for c in "\x00\r"):
            raise ApplicationError(f"{field}: {entry[:40]!r} is not a name or pattern")
    return "\n".join(entries)


@transaction.atomic
def agent_update(*, actor: Actor, agent: Agent, request_id: str | None = None, **fields: object) -> Agent:
    """Change an agent's owner, active flag, description or VM limit (its name is fixed: tags carry it).
    Deactivating stops its tokens on the next gateway call, and within MCP_TOKEN_CACHE_S for other tools; a VM
    limit applies to guards, recoveries and gateway calls at once, to look-ups within MCP_TOKEN_CACHE_S."""
    unknown = set(fields) - set(_AGENT_FIELDS)
    if unknown:
        raise ApplicationError(f"cannot change {', '.join(sorted(unknown))} of an agent")
    for field in _LIMIT_FIELDS:
        if field in fields:
            fields[field] = _clean_limit(field, fields[field])
    if "changes_need_approval" in fields and not isinstance(fields["changes_need_approval"], bool):
        raise ApplicationError("changes_need_approval must be true or false")
    agent = Agent.objects.select_for_update().get(pk=agent.pk)
    before = agent.audit_data()
    for key, value in fields.items():
        setattr(agent, key, value)
    agent.save(update_fields=list(fields) or None)
    after = agent.audit_data()
    if after["changes_need_approval"] != before["changes_need_approval"]:
        policy_version_raise(
            actor=actor,
            what=f"agent {agent.name}: every change needs a person: {'yes' if agent.changes_need_approval else 'no'}",
            request_id=request_id,
        )
    if after != before:
        _credentials_changed()  # deactivated, or its VM limit changed: tokens verified before are stale
        audit_record(
            actor=actor,
            action=AgentAction.CHANGED,
            target=agent,
            data={"before": before, "after": after},
            request_id=request_id,
        )
    return agent


def _credentials_changed() -> None:
    """Raise the credentials version (``CredentialsVersion``) in the caller's transaction: processes
    that keep verified tokens look them up again on their next call."""
    table = connection.ops.quote_name(CredentialsVersion._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO {table} (id, n) VALUES (1, 1) ON CONFLICT (id) DO UPDATE SET n = {table}.n + 1")


@dataclass(frozen=True)
class IssuedToken:
    """The stored row and the token itself: the only moment the token exists in clear."""

    row: AgentToken
    token: str

    def __repr__(self) -> str:
        return f"IssuedToken(row={self.row!r}, token='***')"


@transaction.atomic
def agent_token_issue(
    *,
    actor: Actor,
    agent: Agent,
    label: str = "",
    expires_at: datetime | None = None,
    granted: tuple[str, ...] = scopes.ALL,
    request_id: str | None = None,
) -> IssuedToken:
    """Issue a new bearer token for ``agent`` holding the scopes ``granted`` (rewind.mcp.scopes, every one by
    default); show ``.token`` once, it cannot be recovered."""
    if expires_at is not None and expires_at <= timezone.now():
        raise ApplicationError("the expiry must be in the future")
    unknown = set(granted) - set(scopes.ALL)
    if unknown or not granted:
        raise ApplicationError(
            f"a token needs one or more of the scopes {', '.join(scopes.ALL)}"
            + (f" (unknown: {', '.join(sorted(unknown))})" if unknown else "")
        )
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    row = AgentToken.objects.create(
        agent=agent,
        token_hash=hash_token(token),
        prefix=token[:DISPLAY_PREFIX_LENGTH],
        label=label[:100],
        scope=" ".join(s for s in scopes.ALL if s in granted),
        created_by=actor.name[:150],
        expires_at=expires_at,
    )
    audit_record(actor=actor, action=AgentAction.TOKEN_ISSUED, target=row, data=row.audit_data(), request_id=request_id)
    return IssuedToken(row=row, token=token)


@dataclass(frozen=True)
class AgentWithToken:
    agent: Agent
    issued: IssuedToken
    created: bool
    replaced: tuple[AgentToken, ...] = ()  # the live tokens of the same label it revoked (``replace``)


@transaction.atomic
def agent_token_issue_by_name(
    *,
    actor: Actor,
    name: str,
    owner: User | None = None,
    label: str = "",
    expires_at: datetime | None = None,
    granted: tuple[str, ...] = scopes.ALL,
    replace: bool = False,
    request_id: str | None = None,
) -> AgentWithToken:
    """A new token for the agent called ``name``, creating the agent (owned by ``owner``, or the default owner)
    when there is none; an inactive agent gets ``ApplicationError`` and nothing changes. ``mcpconfig``,
    ``createagent`` and "Connect an agent" all come here, so all refuse alike. ``replace``: the agent's live
    tokens of the same ``label`` are revoked in the same transaction (a configuration issued again replaces the
    last)."""
    agent = Agent.objects.filter(name=name).first()
    created = agent is None
    if agent is None:
        agent = agent_create(actor=actor, name=name, owner=owner or default_owner(), request_id=request_id)
    elif not agent.is_active:
        raise ApplicationError(f"agent {agent.name} is inactive; activate it in the admin first")
    replaced: list[AgentToken] = []
    if replace and not created:
        for old in AgentToken.objects.filter(agent=agent, label=label[:100], revoked_at__isnull=True).order_by("pk"):
            if agent_token_revoke(actor=actor, token=old, request_id=request_id):
                replaced.append(old)
    issued = agent_token_issue(
        actor=actor, agent=agent, label=label, expires_at=expires_at, granted=granted, request_id=request_id
    )
    return AgentWithToken(agent=agent, issued=issued, created=created, replaced=tuple(replaced))


@transaction.atomic
def agent_token_revoke(*, actor: Actor, token: AgentToken, request_id: str | None = None) -> bool:
    """Revoke ``token``; False (recording nothing) when it was already revoked. A gateway call refuses it next time
    in every process; other tools may accept it for up to MCP_TOKEN_CACHE_S more seconds."""
    now = timezone.now()
    changed = AgentToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=now)
    if not changed:
        return False
    _credentials_changed()
    token.revoked_at = now
    audit_record(
        actor=actor, action=AgentAction.TOKEN_REVOKED, target=token, data=token.audit_data(), request_id=request_id
    )
    return True


def agent_token_touch(*, token_pk: int) -> None:
    """Note that the token was used now, unless noted less than ``LAST_USED_PRECISION`` ago; for people, not
    audited."""
    now = timezone.now()
    AgentToken.objects.filter(pk=token_pk).filter(
        Q(last_used_at__isnull=True) | Q(last_used_at__lt=now - LAST_USED_PRECISION)
    ).update(last_used_at=now)


def default_owner() -> User:
    """The first superuser; agents created from the command line belong to them by default."""
    owner = User.objects.filter(is_superuser=True, is_active=True).order_by("pk").first()
    if owner is None:
        raise NotFoundError(
            "there is no superuser to own the agent; create one (manage.py createsuperuser) or pass --owner"
        )
    return owner


def expiry_in_days(days: int | None) -> datetime | None:
    if days is None:
        return None
    if days < 1:
        raise ApplicationError("--expires-days must be at least 1")
    return timezone.now() + timedelta(days=days)
