"""Reads of the gateway's records (no writes, no upstream asked)."""

from __future__ import annotations

from django.db.models import Count

from rewind.gateway.models import GatewayCall, Upstream, UpstreamTool


def gateway_call_counts() -> dict[tuple[str, str, str], int]:
    """Calls through the gateway by (upstream, decision, outcome): one GROUP BY, for ``/metrics``."""
    rows = GatewayCall.objects.order_by().values_list("upstream_name", "decision", "outcome").annotate(n=Count("id"))
    return {(upstream, decision or "deciding", outcome): n for upstream, decision, outcome, n in rows}


def upstream_tool_counts() -> dict[tuple[str, str], int]:
    """Each upstream's tools by state (exported, collision, gone)."""
    rows = UpstreamTool.objects.order_by().values_list("upstream__name", "state").annotate(n=Count("id"))
    return {(upstream, state): n for upstream, state, n in rows}


def upstreams_failing() -> dict[str, bool]:
    """Each enabled upstream: True when its last listing failed (``last_error`` set)."""
    return {
        name: bool(error) for name, error in Upstream.objects.filter(enabled=True).values_list("name", "last_error")
    }
