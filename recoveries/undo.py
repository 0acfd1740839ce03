"""Undo a change nobody guarded: the newest journal checkpoint strictly before a moment.

The moment is a call forwarded through the gateway (``before_call``) or a time the agent names
(``point_in_time``); Zerto keeps a journal checkpoint every few seconds, so the file as it was just before is
there untagged. "Before" is judged on the recovery site's clock, less a margin of the offset's uncertainty, so a
checkpoint taken just after the call on a clock running ahead is never taken for one before it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.utils import timezone

from rewind.gateway.models import GatewayCall
from rewind.lib.errors import ApplicationError, NotFoundError

# The Date header that measures a ZVM's clock has whole seconds: never trust less than this.
MIN_MARGIN_S = 1.0
# How far back the checkpoint listing looks first; a journal holds one every few seconds.
SEARCH_BACK = timedelta(hours=1)


@dataclass(frozen=True)
class Moment:
    at: datetime  # on our clock
    call_id: str
    described: str


def moment_of_call(call_id: str, *, agent_name: str | None) -> Moment:
    """The moment a call left for its upstream. An agent (``agent_name``) finds only its own calls; a person
    (``agent_name`` None) may name any agent's."""
    value = (call_id or "").strip()
    call = GatewayCall.objects.filter(call_id=value).first() if value else None
    if call is None and agent_name is None:
        raise NotFoundError(f"no call {value[:60]!r} went through the gateway (before_call takes a gateway call id)")
    if call is None or (agent_name is not None and call.agent_name != agent_name):
        raise NotFoundError(
            f"you made no call {value[:60]!r} through the gateway (before_call takes a call id of yours)"
        )
    if call.forwarded_at is None:
        raise ApplicationError(
            f"call {call.call_id} was never forwarded ({call.decision or 'undecided'}): it changed nothing to undo"
        )
    when = call.forwarded_at.astimezone(UTC)
    return Moment(
        when,
        call.call_id,
        f"call {call.call_id} ({call.upstream_name}/{call.tool}, forwarded {when:%Y-%m-%d %H:%M:%S} UTC)",
    )


def moment_of_time(text: str) -> Moment:
    """An ISO 8601 time with its zone; refused in the future."""
    value = (text or "").strip()
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise ApplicationError(
            f"point_in_time {value[:40]!r} is not an ISO 8601 time; give one like 2026-12-01T09:30:00Z"
        ) from None
    if when.tzinfo is None:
        raise ApplicationError("point_in_time needs its time zone, e.g. 2026-12-01T09:30:00Z or +01:00")
    now = timezone.now()
    if when > now:
        raise ApplicationError(
            f"point_in_time {when.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC is in the future (it is now "
            f"{now:%Y-%m-%d %H:%M:%S} UTC); nothing can be recovered from a checkpoint not yet taken"
        )
    when = when.astimezone(UTC)
    return Moment(when, "", f"point in time {when:%Y-%m-%d %H:%M:%S} UTC")
