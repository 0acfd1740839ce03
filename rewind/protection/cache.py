"""The look-up's per-process TTL cache, and its cache-only mode.

One loader at a time per key. A value read once half its time is gone is loaded again in the background while
the old one is still handed out, so a key read steadily never expires in front of callers who would all wait
behind the ZVM's request cap; nothing is handed out older than its ``ttl``. Cache-only mode (per thread) raises
``Miss`` instead of loading, and keeps the earliest expiry of what was read, so an answer built from it expires
with the first.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
MAX_ENTRIES = 5000
# A value read with less than this share of its time left is loaded again in the background.
REFRESH_WHEN_LEFT = 0.5
logger = logging.getLogger(__name__)


class Miss(Exception):
    """Raised by ``TtlCache.get`` in cache-only mode when a value would have to be loaded."""


class _CacheOnly(threading.local):
    """Per thread: whether loads are forbidden (a miss raises ``Miss``), and the earliest
    expiry among the entries read meanwhile."""

    on = False
    fresh_until = float("inf")
    refresh_at = float("inf")  # the earliest moment one of them is due to be refreshed ahead


cache_only = _CacheOnly()


class TtlCache:
    """Values kept ``ttl`` seconds on ``clock``; one loader at a time per key (the others wait for it)."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        background: Callable[[Callable[[], None]], None] | None = None,
    ) -> None:
        self.clock = clock
        self._background = background  # runs a refresh off the caller's thread; None: no refresh-ahead
        self._values: dict[Any, tuple[float, Any]] = {}
        self._locks: dict[Any, threading.Lock] = {}
        self._refreshing: set[Any] = set()
        self._guard = threading.Lock()

    def get(self, key: Any, ttl: float, load: Callable[[], T]) -> T:
        if ttl <= 0:
            if cache_only.on:
                raise Miss
            return load()
        hit = self._values.get(key)
        now = self.clock()
        if hit is not None and hit[0] > now:
            if cache_only.on:
                cache_only.fresh_until = min(cache_only.fresh_until, hit[0])
                cache_only.refresh_at = min(cache_only.refresh_at, hit[0] - ttl * REFRESH_WHEN_LEFT)
            if hit[0] - now < ttl * REFRESH_WHEN_LEFT:
                self._refresh_soon(key, ttl, load)
            return hit[1]
        if cache_only.on:
            raise Miss
        with self._lock_of(key):
            hit = self._values.get(key)
            if hit is not None and hit[0] > self.clock():
                return hit[1]
            value = load()
            self._store(key, ttl, value)
            return value

    def _lock_of(self, key: Any) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(key, threading.Lock())

    def _store(self, key: Any, ttl: float, value: Any) -> None:
        with self._guard:
            if len(self._values) >= MAX_ENTRIES:
                self._prune()
            self._values[key] = (self.clock() + ttl, value)

    def _refresh_soon(self, key: Any, ttl: float, load: Callable[[], Any]) -> None:
        """Load ``key`` again in the background, once at a time per key."""
        if self._background is None:
            return
        with self._guard:
            if key in self._refreshing:
                return
            self._refreshing.add(key)
        try:
            self._background(lambda: self._refresh(key, ttl, load))
        except RuntimeError:  # the runner is shut down (the process is ending): the value simply expires
            with self._guard:
                self._refreshing.discard(key)

    def _refresh(self, key: Any, ttl: float, load: Callable[[], Any]) -> None:
        try:
            # The key's lock: a caller that finds the value expired meanwhile waits for this load.
            with self._lock_of(key):
                hit = self._values.get(key)
                if hit is None or hit[0] - self.clock() < ttl * REFRESH_WHEN_LEFT:
                    self._store(key, ttl, load())
        except Miss:
            pass  # a marker nothing loads (a site remembered as down): it expires as it would have
        except Exception as exc:  # the old value stays until it expires; then a caller loads and sees the error
            logger.info("a look-up cache entry was not refreshed ahead of its expiry (%s)", type(exc).__name__)
        finally:
            with self._guard:
                self._refreshing.discard(key)

    def fresh(self, key: Any) -> bool:
        """Whether ``key`` holds a value that has not expired (nothing is loaded)."""
        hit = self._values.get(key)
        return hit is not None and hit[0] > self.clock()

    def put(self, key: Any, ttl: float, value: Any) -> None:
        if ttl > 0:
            self._store(key, ttl, value)

    def forget(self, key: Any) -> None:
        with self._guard:
            self._values.pop(key, None)

    def _prune(self) -> None:
        now = self.clock()
        for key in [k for k, (exp, _) in self._values.items() if exp <= now]:
            self._values.pop(key, None)
            self._locks.pop(key, None)
        if len(self._values) >= MAX_ENTRIES:
            self._values.clear()
            self._locks.clear()

    def clear(self) -> None:
        with self._guard:
            self._values.clear()
            self._locks.clear()
