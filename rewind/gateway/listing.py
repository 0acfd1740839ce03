"""Refresh an upstream's tool list: ask it (a session of its own), then store what it said."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from django.db import connections

from rewind.gateway.links import UpstreamSpec, UpstreamUnavailable, unavailable
from rewind.gateway.models import Upstream
from rewind.gateway.services import (
    ListedTool,
    ListingReport,
    upstream_listing_failed,
    upstream_spec,
    upstream_tools_record,
)
from rewind.gateway.sessions import one_off
from rewind.lib.concurrency import run_each

T = TypeVar("T")
# A listing is one request: it gets the connect timeout plus at most this, whatever calls may take.
LISTING_LIMIT_S = 60.0
# Upstreams listed at once by the beat: one that hangs costs only its own thread.
REFRESH_THREADS = 8


def run_async(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a coroutine from sync code, also when the calling thread already runs an event loop."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(lambda: asyncio.run(make())).result()


async def list_upstream_tools(spec: UpstreamSpec) -> list[ListedTool]:
    async with one_off(spec) as client:
        try:
            async with asyncio.timeout(spec.connect_timeout_s + min(spec.call_timeout_s, LISTING_LIMIT_S)):
                result = await client.list_tools()
        except (Exception, BaseExceptionGroup) as exc:
            raise unavailable(spec, exc, doing="listing its tools") from None
    return [
        ListedTool(
            name=t.name,
            title=t.title or (t.annotations.title if t.annotations and t.annotations.title else "") or "",
            description=t.description or "",
            input_schema=dict(t.input_schema),
            output_schema=dict(t.output_schema) if t.output_schema is not None else None,
            annotations=t.annotations.model_dump(by_alias=True, exclude_none=True) if t.annotations else None,
            meta=dict(t.meta) if t.meta else None,
        )
        for t in result.tools
    ]


def upstream_tools_refresh(upstream: Upstream) -> ListingReport:
    """List and store the upstream's tools; raises ``UpstreamUnavailable`` (recorded) when it cannot."""
    spec = upstream_spec(upstream)
    try:
        listed = run_async(lambda: list_upstream_tools(spec))
    except UpstreamUnavailable as exc:
        upstream_listing_failed(upstream=upstream, error=exc.message)
        raise
    return upstream_tools_record(upstream=upstream, listed=listed, reserved=set())


def _refresh_one(upstream: Upstream) -> str:
    try:
        report = upstream_tools_refresh(upstream)
    except UpstreamUnavailable as exc:
        return exc.message
    finally:
        connections.close_all()  # this thread's own connections
    return f"{len(report.exported)} tools, {len(report.collisions)} refused"


def upstreams_refresh() -> dict[str, str]:
    """Every enabled upstream's list, at once, each bounded by its own timeouts; what each ended with."""
    upstreams = list(Upstream.objects.filter(enabled=True))
    outcomes = run_each(upstreams, _refresh_one, max_threads=REFRESH_THREADS, name="upstream-listing")
    return {o.item.name: o.result() if o.error is None else f"could not be listed: {o.error}" for o in outcomes}
