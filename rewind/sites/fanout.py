"""Work on several sites at once, each in a thread of its own, under one time limit.

Every sweep that visits sites (the reaper, the late-listing sweep, the identity refresh, the
probe) and every check of several sites (the admin's "Test connection", ``zvm_check``) goes
through ``for_each_site``, so one stuck ZVM delays no other site: its own thread waits for it
(the client's timeouts, once; then its circuit refuses at once), the others finish and are
reported as they do. A site still at work when the time limit comes is reported as such and
left to finish in its thread, so the work given must be safe to overlap with the next sweep
(every sweep's steps are compare-and-swaps).
"""

from __future__ import annotations

import contextvars
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from django.db import connection, connections

from rewind.sites.models import Site
from rewind.zvm import ZvmError

logger = logging.getLogger(__name__)
STILL_RUNNING = "still running at the time limit"


@dataclass(frozen=True)
class SiteOutcome[T]:
    """What the work made of one site: its value, or why there is none."""

    site: Site
    value: T | None = None
    error: str = ""  # the ZVM's error, an unforeseen failure, or STILL_RUNNING
    finished: bool = True  # False: still at work when the time limit came

    @property
    def ok(self) -> bool:
        return self.finished and not self.error


def for_each_site[T](
    sites: Sequence[Site],
    work: Callable[[Site], T],
    *,
    limit_s: float,
    label: str,
    on_done: Callable[[SiteOutcome[T]], None] | None = None,
) -> list[SiteOutcome[T]]:
    """``work(site)`` for every site at once; their outcomes, in the order of ``sites``.

    Waits at most ``limit_s`` in all. ``on_done`` is called in the caller's thread for each
    outcome as it comes (so a report can show each site without waiting for the slowest),
    then for each site still running at the limit. A ``ZvmError`` or any other exception of
    ``work`` becomes the outcome's ``error`` (the unforeseen ones are logged with their
    traceback); this never raises them. The request id bound by the caller goes along.

    Inside an open transaction the sites are worked one after the other in this thread,
    without the limit: a thread's connection could not see the rows the caller has not
    committed. So does a single site, which has no other to delay.
    """
    if connection.in_atomic_block or len(sites) <= 1:
        outcomes = []
        for site in sites:
            outcome = _attempt(site, work, label)
            if on_done is not None:
                on_done(outcome)
            outcomes.append(outcome)
        return outcomes
    done: queue.Queue[SiteOutcome[T]] = queue.Queue()
    for site in sites:
        # A context of its own per thread (one context cannot run in two threads at once).
        context = contextvars.copy_context()
        threading.Thread(
            target=context.run, args=(_in_thread, site, work, label, done), name=f"{label}-{site.pk}", daemon=True
        ).start()
    finished: dict[int, SiteOutcome[T]] = {}
    deadline = time.monotonic() + limit_s
    while len(finished) < len(sites):
        try:
            outcome = done.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            break
        finished[outcome.site.pk] = outcome
        if on_done is not None:
            on_done(outcome)
    for site in sites:
        if site.pk not in finished:
            logger.warning("%s: site %s is %s (%g s); left to finish", label, site.name, STILL_RUNNING, limit_s)
            finished[site.pk] = SiteOutcome(site, error=STILL_RUNNING, finished=False)
            if on_done is not None:
                on_done(finished[site.pk])
    return [finished[site.pk] for site in sites]


def _attempt[T](site: Site, work: Callable[[Site], T], label: str) -> SiteOutcome[T]:
    try:
        return SiteOutcome(site, value=work(site))
    except ZvmError as exc:
        logger.warning("%s: %s", label, exc)
        return SiteOutcome(site, error=str(exc))
    except Exception as exc:
        logger.exception("%s: site %s failed", label, site.name)
        return SiteOutcome(site, error=f"failed unexpectedly ({type(exc).__name__}); see the service log")


def _in_thread[T](site: Site, work: Callable[[Site], T], label: str, done: queue.Queue[SiteOutcome[T]]) -> None:
    outcome: SiteOutcome[T] = SiteOutcome(site, error="failed unexpectedly; see the service log")
    try:
        outcome = _attempt(site, work, label)
    finally:
        # This thread's own connections, closed before anyone hears it is done: a caller may
        # go on to drop the database (tests), which PostgreSQL refuses while one is open.
        connections.close_all()
        done.put(outcome)
