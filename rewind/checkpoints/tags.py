"""The checkpoint tag: ``ai:<agent> | <action> | vm=<vm> | change=<id> | <utc>`` (docs/guard.md).

``agent`` is the authenticated agent's, never a caller's value. ``|`` and control characters leave the action
and the VM's name, so a reader can split a tag back into its fields (a change id holding them is refused). Only
the action is shortened to fit ``REWIND_TAG_MAX_LENGTH``: agent, VM, change id and time tie a checkpoint to a
change, so they stay whole, and a request they do not leave room for is refused.
"""

from __future__ import annotations

import re
import unicodedata
import uuid
from datetime import UTC, datetime

from django.conf import settings

from rewind.lib.errors import ApplicationError

ELLIPSIS = "..."
ACTION_MAX = 200  # the record's column
CHANGE_ID_MAX = 100
_SPACES = re.compile(r"\s+")


_CONTROL = ("Cc", "Cf", "Zl", "Zp")


def _strip_controls(text: str) -> str:
    # A line break or tab still separates words; other control and format characters go.
    return "".join(
        " " if ch.isspace() and unicodedata.category(ch) in _CONTROL else ch
        for ch in text
        if ch != "|" and (ch.isspace() or unicodedata.category(ch) not in _CONTROL)
    )


def _tag_text(text: str) -> str:
    return _SPACES.sub(" ", _strip_controls(text or "")).strip()


def clean_action(action: str) -> str:
    """The action as it goes into the tag; raises ApplicationError when nothing is left."""
    cleaned = _tag_text(action)
    if not cleaned:
        raise ApplicationError("describe the change in 'action' (what you are about to do); it is empty")
    return cleaned[:ACTION_MAX]


def new_change_id() -> str:
    return f"chg-{uuid.uuid4().hex[:16]}"


def clean_change_id(change_id: str | None) -> str:
    """The caller's change id, or a new one. Raises ApplicationError for one a tag cannot carry."""
    if change_id is None or not str(change_id).strip():
        return new_change_id()
    value = str(change_id).strip()
    if len(value) > CHANGE_ID_MAX:
        raise ApplicationError(f"change_id is longer than {CHANGE_ID_MAX} characters")
    if _strip_controls(value) != value or _SPACES.search(value):
        raise ApplicationError("change_id may not contain '|', spaces or control characters")
    return value


def tag_time(now: datetime) -> str:
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def max_tag_length() -> int:
    return min(int(settings.REWIND_TAG_MAX_LENGTH), 255)


def build_tag(*, agent: str, action: str, vm: str, change_id: str, now: datetime) -> str:
    """The tag for one change; ``action`` must already be cleaned. Raises ApplicationError."""
    head = f"ai:{agent} | "
    # The VM's name is the ZVM's, which may hold anything: it loses "|" and control characters too.
    tail = f" | vm={_tag_text(vm) or '?'} | change={change_id} | {tag_time(now)}"
    limit = max_tag_length()
    room = limit - len(head) - len(tail)
    if len(action) <= room:
        return head + action + tail
    if room < 1 + len(ELLIPSIS):
        raise ApplicationError(
            f"the tag would be longer than {limit} characters even with the action cut short; use a shorter change_id"
        )
    return head + action[: room - len(ELLIPSIS)].rstrip() + ELLIPSIS + tail
