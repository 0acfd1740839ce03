"""What agents and their tokens look like over REST; a token's hash never goes out, its value only once."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from django.utils import timezone
from pydantic import AliasPath, Field, computed_field

from rewind.agents.models import Agent, AgentToken
from rewind.lib.rest.outputs import ROWS, OutputModel


class AgentTokenOut(OutputModel):
    presents = AgentToken

    id: int
    prefix: str
    label: str
    scope: str
    created_at: datetime
    created_by: str
    expires_at: datetime | None
    last_used_at: datetime | None
    revoked_at: datetime | None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def active(self) -> bool:
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > timezone.now())


class AgentTokenIssuedOut(AgentTokenOut):
    token: str = Field(description="The bearer token; shown here once and never again.")


class AgentTokenRevokedOut(OutputModel):
    revoked: bool = Field(description="False when the token was revoked already.")
    token: AgentTokenOut


class AgentOut(OutputModel):
    presents = Agent

    id: int
    name: str
    owner: str = Field(validation_alias=AliasPath("owner", "username"))
    is_active: bool
    description: str
    changes_need_approval: bool
    limit_vm_names: str
    limit_vpgs: str
    limit_sites: str
    created_at: datetime
    tokens: Annotated[list[AgentTokenOut], ROWS]
