"""What the mutating-tool catalog looks like to the outside: an entry is to an agent the tool it guards
(``MutatingToolOut``), over REST a record (``MutatingToolRecordOut``), two contracts with a model each."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import AliasChoices, Field

from catalog.models import MutatingTool, ToolSighting
from rewind.lib.rest.outputs import OutputModel


class MutatingToolOut(OutputModel):
    # The row's pattern: the first name is the one the tool's output schema shows.
    tool: str = Field(
        validation_alias=AliasChoices("tool", "pattern"),
        description="server/tool, or server/* for every tool of that server",
    )
    vm_arg: str
    platform: str
    description: str
    decision: str = Field(description="checkpoint, approve (checkpoint, then a person approves the call) or deny")
    enabled: bool
    added_by: str
    added_by_kind: str


class MutatingToolListOut(OutputModel):
    tools: list[MutatingToolOut]


class MutatingToolRecordOut(OutputModel):
    rest_name = "MutatingTool"
    presents = MutatingTool

    id: int
    pattern: str
    is_pattern: bool
    vm_arg: str
    platform: str
    description: str
    decision: str
    enabled: bool
    added_by: str
    added_by_kind: str
    created_at: datetime
    updated_at: datetime


class ToolSightingOut(OutputModel):
    presents = ToolSighting

    id: int
    tool: str
    status: str
    count: int
    first_seen_at: datetime
    last_seen_at: datetime
    agents: Any
    argument_names: Any
    classified_by: str
    classified_at: datetime | None


class SightingClassifiedOut(OutputModel):
    sighting: ToolSightingOut
    entry: MutatingToolRecordOut | None = Field(description="The new entry; null for readonly")
