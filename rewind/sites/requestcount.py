"""ZVM requests counted once for every process, by site and result (``rewind.zvm.counting``).

Not prometheus-client's counters: a scrape reaches one of several processes, and its multiprocess mode needs
them on one host sharing one directory; so the count lives in the shared store. Each process adds its requests
up for at most ``FLUSH_AFTER_S`` and writes them in one go (a write per request was costly: measured, see the
benchmarks page). A count that cannot be written is lost, never an error for the call it counts.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter

from django.db import connections

from rewind.lib.sharedstore import Counters, Fallback, SharedStore
from rewind.sites.models import ZvmRequestCount

logger = logging.getLogger(__name__)

REDIS_KEY = "rewind:zvm:requests"
REQUESTS = Counters(REDIS_KEY, ZvmRequestCount, ("site", "result"))
FLUSH_AFTER_S = 1.0
Counts = dict[tuple[str, ...], int]


class BatchedRequestCounter:
    """Requests counted in this process, added to ``store`` in one go at most ``FLUSH_AFTER_S`` later, on a timer
    thread of its own that closes its database connection when done; ``flush`` writes at once."""

    def __init__(self, store: SharedStore) -> None:
        self.store = store
        self._fallback = Fallback(store, "ZVM requests are not counted", logger)
        self._lock = threading.Lock()
        self._pending: Counter[tuple[str, ...]] = Counter()
        self._timer: threading.Timer | None = None

    def count(self, site: str, result: str) -> None:
        with self._lock:
            self._pending[(site, result)] += 1
            if self._timer is None:
                self._timer = threading.Timer(FLUSH_AFTER_S, self._flush_in_timer)
                self._timer.daemon = True
                self._timer.start()

    def flush(self) -> None:
        with self._lock:
            pending, self._pending = dict(self._pending), Counter()
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
        if pending:
            self._fallback.call(lambda: self.store.add(REQUESTS, pending), lambda: None)

    def counts(self) -> Counts:
        """The shared totals, this process's own requests written first; raises when the store does
        not answer (a scrape reports that, not zeros)."""
        self.flush()
        return self.store.totals(REQUESTS)

    def _flush_in_timer(self) -> None:
        try:
            self.flush()
        except Exception as exc:  # a metric never fails anything; nobody would hear of it on this thread
            logger.warning("ZVM requests were not counted (%s)", type(exc).__name__)
        finally:
            connections.close_all()  # this thread ends here; its connection must not outlive it
