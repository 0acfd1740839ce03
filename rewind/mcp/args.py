"""Strict argument types for MCP tools: what gates an action or names a record.

The SDK validates a call's arguments against a pydantic model built from the tool
function's signature before the tool runs, and publishes that model as the tool's input
schema. Pydantic's default (lax) mode would read ``"yes"``, ``"true"`` or ``1`` as ``True``
and ``"3"`` or ``true`` as the integer 3 (``bool`` is an ``int`` in Python): a destructive
gate or a record id must not be guessed from such a value. These types are strict, so a
wrong JSON type is refused by the SDK with an error naming the argument, before any of our
code runs (no row, no audit event but the call's own, no ZVM call).

Decisions, the same for every tool:
- a record id (``id``) is a JSON integer of at least 1: not ``true``, ``"3"`` or ``3.0``;
- a flag (``confirmed``, ``wait``, ``live_only``) is a JSON boolean: not ``"true"``, ``"yes"``
  or ``1``; ``confirmed`` must also be ``true`` (checked by the tool, which says how);
- a time in seconds (``timeout_s``) is a JSON number within its bounds, not a string or a boolean
  (``StrictFloat``, which takes a JSON integer too; its bounds live beside the tool);
- a selector naming a record (``change_id``, ``checkpoint``, ``session_id``) is a JSON string
  with at least one non-space character: a blank one is refused rather than read as "omitted".
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StrictBool, StrictInt, StrictStr

RecordId = Annotated[StrictInt, Field(ge=1, description="The record's id: a JSON integer")]
Flag = StrictBool
Confirmed = Annotated[
    StrictBool,
    Field(
        description='JSON true to confirm the action, e.g. true (not the string "true", "yes" or 1); '
        "anything else and nothing is done"
    ),
]

# The pattern is a search: the value holds at least one character that is not white space.
Selector = Annotated[StrictStr, Field(min_length=1, pattern=r"\S")]
