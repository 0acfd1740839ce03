"""Strict argument types for MCP tools: what gates an action or names a record.

Pydantic's lax mode would read ``"yes"`` or ``1`` as ``True`` and ``true`` as the integer 1: a destructive gate
or a record id must not be guessed from such a value, so the SDK refuses a wrong JSON type, naming the argument,
before any of our code runs. A record id is a JSON integer of at least 1; a flag a JSON boolean; a time in
seconds a JSON number; a selector naming a record a string with a non-space character (blank is refused, not
read as omitted).
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
