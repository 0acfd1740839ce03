"""What a call through the gateway looks like to the outside: one definition for REST and the MCP answer.

Over REST (``/api/gateway/calls/``) a call is its record, less what is internal (the upstream's
row, the agent's row id); to the agent that made it, the forwarded result's ``_meta`` names the
call by the id an undo asks for (``zerto_recover_file(before_call=...)``), and the guard taken
first, when there was one (``rewind.checkpoints.presenters.guard_meta``).
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from rewind.gateway.models import GatewayCall

META_CALL_ID = "zerto-rewind/call_id"
META_GUARD = "zerto-rewind/guard"


def gateway_call_meta(call: GatewayCall, guard: dict[str, Any] | None = None) -> dict[str, Any]:
    """The keys a forwarded call's result carries in ``_meta`` about the call (and its guard)."""
    meta: dict[str, Any] = {META_CALL_ID: call.call_id}
    if guard is not None:
        meta[META_GUARD] = guard
    return meta


class GatewayCallSerializer(serializers.ModelSerializer):
    class Meta:
        model = GatewayCall
        exclude = ["upstream", "agent_id"]
