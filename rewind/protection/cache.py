"""The look-up's per-process TTL cache, and its cache-only mode.

``TtlCache`` keeps values ``ttl`` seconds on its ``clock`` (``time.monotonic`` unless a test
hands it another), with one loader at a time per key: concurrent callers wait for it.

Cache-only mode (per thread, ``cache_only.on``) forbids loads: a value that would have to be
loaded raises ``Miss`` instead, and ``cache_only.fresh_until`` keeps the earliest expiry
among the entries read meanwhile, so an answer built from them expires with the first.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
MAX_ENTRIES = 5000


class Miss(Exception):
    """Raised by ``TtlCache.get`` in cache-only mode when a value would have to be loaded."""


class _CacheOnly(threading.local):
    """Per thread: whether loads are forbidden (a miss raises ``Miss``), and the earliest
    expiry among the entries read meanwhile."""

    on = False
    fresh_until = float("inf")


cache_only = _CacheOnly()


class TtlCache:
    """Values kept ``ttl`` seconds on ``clock``; one loader at a time per key (the others wait for it)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._values: dict[Any, tuple[float, Any]] = {}
        self._locks: dict[Any, threading.Lock] = {}
        self._guard = threading.Lock()

    def get(self, key: Any, ttl: float, load: Callable[[], T]) -> T:
        if ttl <= 0:
            if cache_only.on:
                raise Miss
            return load()
        hit = self._values.get(key)
        if hit is not None and hit[0] > self.clock():
            if cache_only.on:
                cache_only.fresh_until = min(cache_only.fresh_until, hit[0])
            return hit[1]
        if cache_only.on:
            raise Miss
        with self._guard:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            hit = self._values.get(key)
            if hit is not None and hit[0] > self.clock():
                return hit[1]
            value = load()
            with self._guard:
                if len(self._values) >= MAX_ENTRIES:
                    self._prune()
                self._values[key] = (self.clock() + ttl, value)
            return value

    def fresh(self, key: Any) -> bool:
        """Whether ``key`` holds a value that has not expired (nothing is loaded)."""
        hit = self._values.get(key)
        return hit is not None and hit[0] > self.clock()

    def put(self, key: Any, ttl: float, value: Any) -> None:
        if ttl <= 0:
            return
        with self._guard:
            if len(self._values) >= MAX_ENTRIES:
                self._prune()
            self._values[key] = (self.clock() + ttl, value)

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
