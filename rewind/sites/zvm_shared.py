"""The ZVM client's shared stores: one request cap per ZVM, one token per login, one circuit and one request count
per site, for all our processes, in the shared store (Redis, else the database).

Tokens are Fernet-encrypted wherever they are stored; no token, ciphertext or Redis URL is logged. Shared times
are wall-clock seconds, so hosts sharing one database keep their clocks in step (NTP).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from functools import lru_cache

from django.conf import settings

from rewind.lib.crypto import DecryptionError, decrypt, encrypt
from rewind.lib.sharedstore import DbStore, Fallback, Record, Records, RedisStore, SharedStore
from rewind.sites.circuit import SharedBreaker
from rewind.sites.models import ZvmRateWindow, ZvmToken
from rewind.sites.requestcount import BatchedRequestCounter
from rewind.zvm import StoredToken, Stores
from rewind.zvm.pacing import LATE_S, LOCAL_PACER, next_slot, window_shape

logger = logging.getLogger(__name__)

RATE_PREFIX = "rewind:zvm:rate:"
TOKEN_PREFIX = "rewind:zvm:token:"
CLAIM_PREFIX = "rewind:zvm:login:"
# The send times lately reserved for one ZVM: in Redis a list that the script below keeps, in
# the database one row's text, ascending.
WINDOWS = Records(RATE_PREFIX, ZvmRateWindow, ("recent",))
TOKENS = Records(TOKEN_PREFIX, ZvmToken, ("token_encrypted", "expires_at", "lifetime"), redis_hash=False)
CLAIMS = Records(CLAIM_PREFIX, ZvmToken, ("login_claimed_until",), redis_hash=False)

# KEYS[1]: a list of the send times reserved lately for one ZVM, in microseconds, ascending.
# ARGV[1]: n, ARGV[2]: the window in microseconds (see rewind.zvm.pacing.next_slot, the same rule).
# Returns the microseconds the caller waits for its slot; the slot is taken either way.
_RESERVE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local n = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local slot = now
local len = redis.call('LLEN', KEYS[1])
if len >= n then
  local nth = tonumber(redis.call('LINDEX', KEYS[1], -n))
  if nth + window > slot then slot = nth + window end
end
if len > 0 then
  local last = tonumber(redis.call('LINDEX', KEYS[1], -1))
  if last > slot then slot = last end
end
redis.call('RPUSH', KEYS[1], string.format('%d', slot))
redis.call('LTRIM', KEYS[1], -n, -1)
redis.call('PEXPIRE', KEYS[1], math.ceil((slot - now + window) / 1000) + 1000)
return slot - now
"""


class SharedPacer:
    """The request cap counted in the shared store: one step per request. In Redis, a script on Redis's clock that
    places the slot somewhere in the round trip, so a slot a round trip longer than ``LATE_S`` may have made
    late is given up and another taken (measured: see the benchmarks page). In the database, a change of the
    ZVM's row under its lock, the wait counted from after the commit."""

    TRIES = 4

    def __init__(self, store: RedisStore | DbStore, clock: Callable[[], float] = time.monotonic) -> None:
        self._store = store
        self._clock = clock
        self._fallback = Fallback(store, "ZVM request caps are counted per process", logger)
        self._script = store.link.client.register_script(_RESERVE) if isinstance(store, RedisStore) else None

    def reserve(self, key: str, per_s: float) -> float:
        n, window = window_shape(per_s)
        if self._store.in_caller_transaction():
            # The row lock would last until the caller's transaction ends and hold up every other
            # process's calls to this ZVM meanwhile. ZVM calls are not made inside transactions by
            # design; one that is counts in this process.
            return LOCAL_PACER.reserve(key, per_s)
        take = self._in_redis if self._script is not None else self._in_db
        return self._fallback.call(lambda: take(key, n, window), lambda: LOCAL_PACER.reserve(key, per_s))

    def _in_redis(self, key: str, n: int, window: float) -> float:
        assert self._script is not None
        for _ in range(self.TRIES):
            sent = self._clock()
            wait_us = self._script(keys=[RATE_PREFIX + key], args=[n, int(window * 1_000_000)])
            if self._clock() - sent <= LATE_S:
                break
        return int(wait_us) / 1_000_000

    def _in_db(self, key: str, n: int, window: float) -> float:
        def take(h: Record) -> tuple[Record, float]:
            recent = [float(t) for t in h.get("recent", "").split()]
            slot = next_slot(recent, time.time(), n, window)
            return {"recent": " ".join(f"{t:.6f}" for t in [*recent, slot][-n:])}, slot

        slot = self._store.change(WINDOWS, key, take)
        # Counted from now, after the commit: a commit that waited for the write lock must not
        # be slept on top of the slot, or the sender arrives in the next window, over the cap;
        # one that ended after the slot says by how much (the sender then takes another).
        return slot - time.time()


def _sealed(token: StoredToken) -> Record:
    return {
        "token_encrypted": encrypt(token.token),
        "expires_at": str(token.expires_at),
        "lifetime": str(token.lifetime),
    }


def _opened(h: Record) -> StoredToken | None:
    """The token in a stored record, or None (absent, malformed, or sealed under another key)."""
    try:
        sealed = h.get("token_encrypted")
        if not sealed:
            return None
        return StoredToken(token=decrypt(sealed), expires_at=float(h["expires_at"]), lifetime=float(h["lifetime"]))
    except (ValueError, KeyError, TypeError, DecryptionError):
        return None


class SharedTokenStore:
    """Tokens in the shared store, encrypted, each expiring with the token; one login at a time claimed there.
    While the store does not answer, each client keeps its own and may log in."""

    def __init__(self, store: SharedStore) -> None:
        self._store = store
        self._fallback = Fallback(store, "ZVM tokens are kept per process", logger)

    def get(self, key: str) -> StoredToken | None:
        return self._fallback.call(lambda: _opened(self._store.get(TOKENS, key)), lambda: None)

    def put(self, key: str, token: StoredToken) -> None:
        ttl_s = token.expires_at - time.time()
        if ttl_s <= 0:
            return

        def stored() -> None:
            self._store.put(TOKENS, key, _sealed(token), ttl_s=ttl_s)
            self._store.delete(CLAIMS, key)

        self._fallback.call(stored, lambda: None)

    def discard(self, key: str, token: str) -> None:
        def unless_replaced(h: Record) -> tuple[Record | None, None]:
            held = _opened(h)
            return ({} if held is not None and held.token == token else None), None

        self._fallback.call(lambda: self._store.change(TOKENS, key, unless_replaced), lambda: None)

    def claim_login(self, key: str, ttl: float) -> bool:
        def claim(h: Record) -> tuple[Record | None, bool]:
            now = time.time()
            if float(h.get("login_claimed_until") or 0) >= now:
                return None, False
            return {"login_claimed_until": str(now + ttl)}, True

        return self._fallback.call(lambda: self._store.change(CLAIMS, key, claim, ttl_s=ttl), lambda: True)

    def release_login(self, key: str) -> None:
        self._fallback.call(lambda: self._store.delete(CLAIMS, key), lambda: None)


_LOCK = threading.Lock()
_COUNTERS: list[BatchedRequestCounter] = []  # every request counter of this process
Shared = tuple[SharedPacer, SharedTokenStore, SharedBreaker, BatchedRequestCounter]


def _on(store: RedisStore | DbStore) -> Shared:
    counter = BatchedRequestCounter(store)
    _COUNTERS.append(counter)
    return SharedPacer(store), SharedTokenStore(store), SharedBreaker(store), counter


_DB_STORES = _on(DbStore())


def db_stores() -> Shared:
    return _DB_STORES


@lru_cache(maxsize=4)
def redis_stores(url: str) -> Shared:
    """The pacer, token store, circuits and request counter on the Redis at ``url``, one set (and one client) per URL."""
    return _on(RedisStore(url))


def _current() -> Shared:
    url = settings.ZVM_SHARED_REDIS_URL
    if url:
        with _LOCK:
            return redis_stores(url)
    return _DB_STORES


def shared_stores() -> Stores:
    """The stores every ``shared_client`` of this process uses (Redis when configured, else the database)."""
    pacer, tokens, breaker, requests = _current()
    return Stores(pacer=pacer, tokens=tokens, breaker=breaker, requests=requests)


def request_counts_flush() -> None:
    """Write every request count this process holds now, not when its timer comes (tests; a process leaving)."""
    for counter in list(_COUNTERS):
        counter.flush()


def request_counter() -> BatchedRequestCounter:
    return _current()[3]


def shared_breaker() -> SharedBreaker:
    return _current()[2]
