"""The metrics, each read when Prometheus scrapes, from what every process shares. A source that fails is left out
of this scrape, logged and reported as ``rewind_metrics_source_up{source="..."} 0``; the others are still
served.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.utils import floatToGoString

from recoveries.selectors import flr_sessions_live_ours_by_site, flr_site_listings, recoveries_awaiting_approval
from rewind.audit.actions import AuditLogAction, McpAction, RecoveryAction
from rewind.audit.selectors import audit_last_verification
from rewind.checkpoints.models import ChangeGuard
from rewind.checkpoints.selectors import guard_counts_by_status, guard_waits_by_status
from rewind.gateway.selectors import gateway_call_counts, upstream_tool_counts, upstreams_failing
from rewind.metrics.tally import AuditTally
from rewind.sites.zvm_shared import request_counter
from rewind.workers.selectors import broker_outage_count, broker_outage_open, worker_clock_offsets, workers_seen

logger = logging.getLogger(__name__)

# Seconds from a guard's request to its end: a listing takes seconds, a slow ZVM minutes, and
# REWIND_CHECKPOINT_TIMEOUT_S (300 s by default) ends the wait.
GUARD_WAIT_BOUNDS = (1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)
FINAL_GUARD = (ChangeGuard.Status.OK, ChangeGuard.Status.FAILED)
# What only the reaper writes, and the recoveries it failed for running too long (their audit
# data says "by": "reaper"). The runner also marks sessions vanished and records failed
# unmounts, so those are not counted here.
REAPER_ACTIONS = (RecoveryAction.SESSION_REAPED, RecoveryAction.EXPIRED, RecoveryAction.RESULT_PURGED)
# A tool name is the caller's: one that is not a plausible tool name is counted as "other",
# so a client cannot fill the metrics with names of its making.
TOOL_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")

_REAPER_TALLY = AuditTally(actions=[*REAPER_ACTIONS, RecoveryAction.FAILED], keys=["action", "data.by"])
_MCP_TALLY = AuditTally(actions=[McpAction.TOOL_CALLED], keys=["target_id", "data.outcome"])


def _guards() -> Iterator[Metric]:
    counts = guard_counts_by_status()
    finished = CounterMetricFamily("rewind_guards", "Guards finished, by outcome.", labels=["status"])
    for status in FINAL_GUARD:
        finished.add_metric([status], counts.get(status, 0))
    unfinished = GaugeMetricFamily("rewind_guards_unfinished", "Guards not finished yet, by status.", labels=["status"])
    for status in ChangeGuard.UNFINISHED:
        unfinished.add_metric([status], counts.get(status, 0))
    yield finished
    yield unfinished


def _guard_waits() -> Iterator[Metric]:
    family = HistogramMetricFamily(
        "rewind_guard_wait_seconds",
        "Finished guards: seconds from the request to the end (every VPG listed, or the first failure or the timeout).",
        labels=["status"],
    )
    waits = guard_waits_by_status(GUARD_WAIT_BOUNDS)
    for status in FINAL_GUARD:
        found = waits.get(status)
        at_most = found.at_most if found else [0] * len(GUARD_WAIT_BOUNDS)
        buckets = [(floatToGoString(bound), n) for bound, n in zip(GUARD_WAIT_BOUNDS, at_most, strict=True)]
        buckets.append(("+Inf", found.count if found else 0))
        family.add_metric([status], buckets, found.sum_s if found else 0.0)
    yield family


def _zvm_requests() -> Iterator[Metric]:
    family = CounterMetricFamily(
        "rewind_zvm_requests",
        "HTTP requests sent to each site's ZVM, by result: the answer's status class, or why there was none.",
        labels=["site", "result"],
    )
    for (site, result), n in sorted(request_counter().counts().items()):
        family.add_metric([site, result], n)
    yield family


def _flr_sessions() -> Iterator[Metric]:
    family = GaugeMetricFamily(
        "rewind_flr_sessions_live",
        "FLR sessions holding a mount, by site and owner: ours from our records, foreign from the site's last listing.",
        labels=["site", "owner"],
    )
    listed = GaugeMetricFamily(
        "rewind_flr_sessions_listed_timestamp_seconds",
        "When the site's FLR sessions were last listed (the foreign count's age).",
        labels=["site"],
    )
    for site, n in sorted(flr_sessions_live_ours_by_site().items()):
        family.add_metric([site, "ours"], n)
    for site, listed_at, foreign in flr_site_listings():
        family.add_metric([site, "foreign"], foreign)
        listed.add_metric([site], listed_at.timestamp())
    yield family
    yield listed


def _approvals() -> Iterator[Metric]:
    yield GaugeMetricFamily(
        "rewind_recoveries_awaiting_approval",
        "Recovery requests waiting for a person.",
        value=recoveries_awaiting_approval(),
    )


def _reaper() -> Iterator[Metric]:
    family = CounterMetricFamily(
        "rewind_reaper_actions", "What the reaper did, by the audit action it recorded.", labels=["action"]
    )
    counts: dict[str, int] = {str(action): 0 for action in (*REAPER_ACTIONS, RecoveryAction.FAILED)}
    for (action, by), n in _REAPER_TALLY.counts().items():
        if action != RecoveryAction.FAILED or by == "reaper":
            counts[action] = counts.get(action, 0) + n
    for action, n in counts.items():
        family.add_metric([action], n)
    yield family


def _mcp_calls() -> Iterator[Metric]:
    family = CounterMetricFamily("rewind_mcp_calls", "MCP tool calls, by tool and outcome.", labels=["tool", "outcome"])
    counts: dict[tuple[str, str], int] = {}
    for (tool, outcome), n in _MCP_TALLY.counts().items():
        key = (tool if TOOL_NAME.fullmatch(tool) else "other", outcome)
        counts[key] = counts.get(key, 0) + n
    for (tool, outcome), n in sorted(counts.items()):
        family.add_metric([tool, outcome], n)
    yield family


def _gateway() -> Iterator[Metric]:
    calls = CounterMetricFamily(
        "rewind_gateway_calls",
        "Calls through the gateway, by upstream, decision (guarded, passed, held, refused) and outcome.",
        labels=["upstream", "decision", "outcome"],
    )
    for (upstream, decision, outcome), n in sorted(gateway_call_counts().items()):
        calls.add_metric([upstream, decision, outcome], n)
    yield calls
    tools = GaugeMetricFamily(
        "rewind_gateway_tools",
        "Upstream tools, by upstream and state (exported, collision, gone).",
        labels=["upstream", "state"],
    )
    for (upstream, state), n in sorted(upstream_tool_counts().items()):
        tools.add_metric([upstream, state], n)
    yield tools
    failing = GaugeMetricFamily(
        "rewind_gateway_upstream_listing_failed",
        "1 when the enabled upstream's last tool listing failed (it may be down).",
        labels=["upstream"],
    )
    for upstream, failed in sorted(upstreams_failing().items()):
        failing.add_metric([upstream], 1 if failed else 0)
    yield failing


def _workers() -> Iterator[Metric]:
    seen = workers_seen()
    yield GaugeMetricFamily("rewind_workers_alive", "Celery workers whose heartbeat is fresh.", value=seen.alive)
    offsets = GaugeMetricFamily(
        "rewind_worker_clock_offset_seconds",
        "How far each alive worker's clock is from the database's at its last heartbeat (positive: ahead).",
        labels=["worker"],
    )
    for name, offset in worker_clock_offsets():
        offsets.add_metric([name], offset)
    yield offsets
    outage = broker_outage_open()
    yield GaugeMetricFamily(
        "rewind_task_queue_up",
        "0 while the task queue (Celery's broker) does not answer, else 1.",
        value=0 if outage else 1,
    )
    yield CounterMetricFamily(
        "rewind_task_queue_outages", "Task-queue outages recorded (those retention keeps).", value=broker_outage_count()
    )


def _audit_chain() -> Iterator[Metric]:
    """The newest recorded check of the audit chain (``audit_verify``, the anchor publisher)."""
    last = audit_last_verification()
    intact = GaugeMetricFamily(
        "rewind_audit_chain_intact",
        "1 when the newest recorded check of the audit chain found it intact, 0 when it found it broken "
        "(no sample before the first check).",
    )
    broken_at = GaugeMetricFamily(
        "rewind_audit_chain_broken_at", "The event the newest recorded check found the chain broken at (0: intact)."
    )
    checked_at = GaugeMetricFamily(
        "rewind_audit_chain_checked_timestamp_seconds", "When the newest recorded check of the audit chain ran."
    )
    if last is not None:
        broken = last.action == AuditLogAction.CHAIN_BROKEN
        data = last.data if isinstance(last.data, dict) else {}
        intact.add_metric([], 0 if broken else 1)
        broken_at.add_metric([], int(data.get("broken_at") or 0) if broken else 0)
        checked_at.add_metric([], last.time.timestamp())
    yield from (intact, broken_at, checked_at)


SOURCES: dict[str, Callable[[], Iterable[Metric]]] = {
    "guards": _guards,
    "guard_waits": _guard_waits,
    "zvm_requests": _zvm_requests,
    "flr_sessions": _flr_sessions,
    "approvals": _approvals,
    "reaper": _reaper,
    "mcp_calls": _mcp_calls,
    "gateway": _gateway,
    "workers": _workers,
    "audit_chain": _audit_chain,
}


class RewindCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "rewind_metrics_source_up", "1 when this scrape could read the source, else 0.", labels=["source"]
        )
        for name, source in SOURCES.items():
            try:
                metrics = list(source())
            except Exception:
                logger.exception("metrics: could not read %s", name)
                up.add_metric([name], 0)
                continue
            up.add_metric([name], 1)
            yield from metrics
        yield up


# Not prometheus-client's default registry: its process and platform metrics would describe
# whichever worker answered the scrape, and change from scrape to scrape.
REGISTRY = CollectorRegistry(auto_describe=False)
REGISTRY.register(RewindCollector())
