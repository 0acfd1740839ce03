"""Reads of agents and their tokens (database only)."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.db import connection
from django.db.models import Prefetch, Q, QuerySet
from django.utils import timezone

from rewind.agents.limits import FIELDS as VM_LIMIT_FIELDS
from rewind.agents.limits import VmLimit
from rewind.agents.models import Agent, AgentToken, CredentialsVersion
from rewind.lib.errors import NotFoundError


def agent_list() -> QuerySet[Agent]:
    return (
        Agent.objects.select_related("owner")
        .prefetch_related(Prefetch("tokens", queryset=AgentToken.objects.order_by("-created_at", "-pk")))
        .order_by("name")
    )


def agent_get(pk: int) -> Agent:
    agent = agent_list().filter(pk=pk).first()
    if agent is None:
        raise NotFoundError(f"there is no agent #{pk}")
    return agent


def agent_name_taken(name: str) -> bool:
    return Agent.objects.filter(name=name).exists()


def agent_owner_candidate(username: str) -> User | None:
    """The active user ``username``, who may own an agent; None when there is none."""
    return User.objects.filter(username=username, is_active=True).first()


def agent_vm_limit(agent_id: int) -> VmLimit:
    """The VM limit of agent ``agent_id`` as stored now (none for an unknown agent: its calls fail elsewhere)."""
    agent = Agent.objects.filter(pk=agent_id).only(*VM_LIMIT_FIELDS).first()
    return VmLimit.of(agent) if agent is not None else VmLimit()


def agent_token_get(*, agent: Agent, token_id: int) -> AgentToken:
    token = AgentToken.objects.select_related("agent").filter(agent=agent, pk=token_id).first()
    if token is None:
        raise NotFoundError(f"agent {agent.name} has no token #{token_id}")
    return token


def agent_token_active(*, token_hash: str) -> AgentToken | None:
    """The row of the token hashing to ``token_hash`` (``hash_token``), with its agent, if the
    token is unrevoked and unexpired and its agent active; None otherwise."""
    return (
        AgentToken.objects.select_related("agent")
        .filter(token_hash=token_hash, revoked_at__isnull=True, agent__is_active=True)
        .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now()))
        .first()
    )


def credentials_version_sql() -> str:
    """A scalar subquery of the credentials version (``CredentialsVersion``), 0 before any change:
    for a statement a call runs anyway, so reading it costs no query of its own."""
    table = connection.ops.quote_name(CredentialsVersion._meta.db_table)
    return f"COALESCE((SELECT n FROM {table} WHERE id = 1), 0)"


def credentials_version() -> int:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {credentials_version_sql()}")
        return int(cursor.fetchone()[0])


def agent_token_still_active(*, token_pk: int) -> bool:
    """Whether token ``token_pk`` is still unrevoked and unexpired, and its agent active."""
    return (
        AgentToken.objects.filter(pk=token_pk, revoked_at__isnull=True, agent__is_active=True)
        .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now()))
        .exists()
    )


def agent_changes_need_approval(agent_id: int | None) -> bool:
    """Whether every guarded change of this agent waits for a person (its setting, read afresh)."""
    if agent_id is None:
        return False
    return bool(Agent.objects.filter(pk=agent_id).values_list("changes_need_approval", flat=True).first())
