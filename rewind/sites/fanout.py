"""Work on several sites at once, each in a thread of its own, under one time limit.

Every sweep and check that visits sites goes through ``for_each_site``, so one stuck ZVM delays no other site. A
site still at work at the limit is reported and left to finish, so the work must be safe to overlap with the
next sweep (every sweep's steps are compare-and-swaps).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from django.db import connection

from rewind.lib.concurrency import Outcome, run_each
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
    """``work(site)`` for every site at once, waiting at most ``limit_s`` in all; their outcomes, in the order of
    ``sites``. ``on_done`` gets each outcome in the caller's thread as it comes. Any exception of ``work``
    becomes the outcome's ``error`` (the unforeseen ones logged), never raised; the caller's request id goes
    along.

    Inside an open transaction, or for a single site, the sites are worked one after the other in this thread,
    without the limit: a thread's connection could not see the rows the caller has not committed.
    """

    def report(outcome: Outcome[Site, T]) -> None:
        site_outcome = _site_outcome(outcome, label, limit_s)
        outcomes[outcome.item.pk] = site_outcome
        if on_done is not None:
            on_done(site_outcome)

    outcomes: dict[int, SiteOutcome[T]] = {}
    run_each(
        sites,
        work,
        limit_s=limit_s,
        inline=connection.in_atomic_block or len(sites) <= 1,
        name=label,
        on_done=report,
    )
    return [outcomes[site.pk] for site in sites]


def _site_outcome[T](outcome: Outcome[Site, T], label: str, limit_s: float) -> SiteOutcome[T]:
    site, exc = outcome.item, outcome.error
    if not outcome.finished:
        logger.warning("%s: site %s is %s (%g s); left to finish", label, site.name, STILL_RUNNING, limit_s)
        return SiteOutcome(site, error=STILL_RUNNING, finished=False)
    if isinstance(exc, ZvmError):
        logger.warning("%s: %s", label, exc)
        return SiteOutcome(site, error=str(exc))
    if exc is not None:
        logger.error("%s: site %s failed", label, site.name, exc_info=exc)
        return SiteOutcome(site, error=f"failed unexpectedly ({type(exc).__name__}); see the service log")
    return SiteOutcome(site, value=outcome.value)
