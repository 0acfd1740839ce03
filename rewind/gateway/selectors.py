"""Reads of the gateway's records (no writes, no upstream asked)."""

from __future__ import annotations

import os
import socket

from django.db.models import Count, F, QuerySet

from rewind.gateway.models import GatewayCall, Upstream, UpstreamLink, UpstreamTool
from rewind.lib.errors import NotFoundError


def upstream_list() -> QuerySet[Upstream]:
    """Every upstream with its tools in one more query: each one is shown with its tool list."""
    return Upstream.objects.prefetch_related("tools")


def upstream_get(pk: int) -> Upstream:
    """The upstream ``pk``, read afresh. Raises NotFoundError."""
    found = Upstream.objects.filter(pk=pk).first()
    if found is None:
        raise NotFoundError(f"no upstream #{pk}")
    return found


def upstream_tool_get(pk: int) -> UpstreamTool:
    """The tool ``pk`` with its upstream (a policy change is audited under ``upstream/tool``). Raises NotFoundError."""
    tool = UpstreamTool.objects.select_related("upstream").filter(pk=pk).first()
    if tool is None:
        raise NotFoundError(f"no upstream tool #{pk}")
    return tool


def upstream_tool_problem(*, upstream: Upstream, name: str) -> str:
    """Why the upstream's tool ``name`` is not exported (empty when it is): what a refused tool is told."""
    return upstream.tools.get(name=name).problem


def upstream_exported_count(upstream: Upstream) -> int:
    """How many of the upstream's tools agents can call."""
    return upstream.tools.filter(state=UpstreamTool.State.EXPORTED).count()


def _exported() -> QuerySet[UpstreamTool]:
    """Exported by an enabled upstream, held ones too: a call of a held tool is refused saying so."""
    return UpstreamTool.objects.filter(state=UpstreamTool.State.EXPORTED, upstream__enabled=True).select_related(
        "upstream"
    )


def exported_tools() -> list[UpstreamTool]:
    """The tools agents see on /mcp: exported by an enabled upstream with the definition a person approved,
    by upstream then name.

    Read from what the last listings stored, so every worker and replica answers the same."""
    return list(_exported().filter(digest=F("approved_digest")).order_by("upstream__name", "name"))


def exported_names() -> frozenset[str]:
    """The names a call is routed to the gateway by (held tools too): what a process keeps briefly, without a query."""
    return frozenset(_exported().values_list("exposed_name", flat=True))


def held_tools() -> QuerySet[UpstreamTool]:
    """Exported tools whose definition is new or changed since a person approved one, oldest listing first."""
    return _exported().exclude(digest=F("approved_digest")).order_by("first_listed_at")


def exported_name_exists(exposed_name: str) -> bool:
    """Whether ``exposed_name`` is an exported tool now (listed since a process last kept the names, maybe)."""
    return _exported().filter(exposed_name=exposed_name).exists()


def gateway_call_list(*, agent: str | None = None, decision: str | None = None) -> QuerySet[GatewayCall]:
    """Calls through the gateway in the model's order (newest first), by agent name and decision when given."""
    calls = GatewayCall.objects.all()
    if agent:
        calls = calls.filter(agent_name=agent)
    if decision:
        calls = calls.filter(decision=decision)
    return calls


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


def _gone(process: str) -> bool:
    """A process of this host that no longer runs (its row outlived it); other hosts' cannot be told."""
    host, _, pid = process.partition(" pid ")
    return host == socket.gethostname() and pid.isdigit() and not os.path.exists(f"/proc/{pid}")


def upstream_links_down(upstream: Upstream) -> list[UpstreamLink]:
    """The processes whose session to the upstream is down now, as each last recorded it."""
    rows = UpstreamLink.objects.filter(upstream=upstream, down_since__isnull=False).order_by("down_since")
    return [row for row in rows if not _gone(row.process)]


def upstream_links_up(upstream: Upstream) -> list[UpstreamLink]:
    """The processes whose session to the upstream answers now, as each last recorded it."""
    rows = UpstreamLink.objects.filter(upstream=upstream, down_since__isnull=True).order_by("process")
    return [row for row in rows if not _gone(row.process)]


def upstream_links_said(upstream: Upstream) -> list[str]:
    """One sentence per process that cannot reach the upstream now; [] when none."""
    return [
        f"{row.process} has not reached it since {row.down_since:%Y-%m-%d %H:%M:%S} UTC ({row.error}); "
        "it tries again on its next call, at most 30 s apart"
        for row in upstream_links_down(upstream)
        if row.down_since is not None
    ]
