"""The ZVM client's shared stores: one request cap per ZVM, one token per login, one circuit
per site (``rewind.sites.circuit``) and one request count per site (``rewind.sites.requestcount``)
for all our processes.

``rewind.zvm`` counts its cap and keeps its tokens per process unless it is handed stores;
this module holds the two kinds the service uses, picked by ``shared_stores``:
- Redis, when ``REDIS_URL`` is set: the cap in one script call per request (on Redis's
  clock), tokens as encrypted values that expire with the token. While Redis does not
  answer, the cap is counted per process and tokens are kept per process (for
  ``rewind.redislink.RETRY_AFTER_FAILURE_S`` at a time, said in the log): a broken Redis
  must not stop ZVM calls.
- the database otherwise (SQLite or PostgreSQL): the cap in one short transaction per
  request, tokens in ``ZvmToken`` rows.

Tokens are Fernet-encrypted (``rewind.crypto``) wherever they are stored, and no token,
ciphertext or Redis URL is ever logged. Times shared between processes are wall-clock
seconds, so hosts sharing one database must keep their clocks in step (NTP).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, lru_cache

from django.conf import settings
from django.db import DatabaseError, IntegrityError, connection, transaction

from rewind.crypto import DecryptionError, decrypt, encrypt
from rewind.redislink import REDIS_DOWN, RedisLink
from rewind.sites.circuit import DbBreaker, RedisBreaker, SharedBreaker
from rewind.sites.models import ZvmRateWindow, ZvmToken
from rewind.sites.requestcount import BatchedRequestCounter, DbRequestCounter, RedisRequestCounter
from rewind.zvm import StoredToken, Stores
from rewind.zvm.pacing import LATE_S, LOCAL_PACER, next_slot, window_shape

logger = logging.getLogger(__name__)

RATE_PREFIX = "rewind:zvm:rate:"
TOKEN_PREFIX = "rewind:zvm:token:"
CLAIM_PREFIX = "rewind:zvm:login:"

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

# Deletes KEYS[1] only if it still holds ARGV[1]: a token refused by the ZVM is dropped
# unless another process has stored a new one meanwhile.
_DELETE_IF_SAME = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class RedisPacer:
    """The request cap counted in Redis: one script call per request.

    The script places the slot on Redis's clock at some moment of the round trip; this
    process knows only that the moment lies between sending the call and reading its
    answer. The wait is counted from the answer, so the sender is never early, and a round
    trip longer than ``LATE_S`` (a busy core, a slow Redis) would leave it late by as much,
    unseen: such a slot is given up and another taken (measured under load: a 36 ms round
    trip put 11 requests in one second at the ZVM).
    """

    TRIES = 4

    def __init__(self, link: RedisLink, clock: Callable[[], float] = time.monotonic) -> None:
        self._link = link
        self._reserve = link.client.register_script(_RESERVE)
        self._clock = clock

    def reserve(self, key: str, per_s: float) -> float:
        n, window = window_shape(per_s)
        if not self._link.up():
            return LOCAL_PACER.reserve(key, per_s)
        for _ in range(self.TRIES):
            sent = self._clock()
            try:
                wait_us = self._reserve(keys=[RATE_PREFIX + key], args=[n, int(window * 1_000_000)])
            except REDIS_DOWN as exc:
                self._link.failed(exc, "ZVM request caps are counted")
                return LOCAL_PACER.reserve(key, per_s)
            if self._clock() - sent <= LATE_S:
                break
        return int(wait_us) / 1_000_000


class DbPacer:
    """The request cap counted in ``ZvmRateWindow``: one short transaction per request.

    The row lock (PostgreSQL) or the write lock (SQLite, IMMEDIATE) makes the read and
    the update one step for every process.
    """

    def reserve(self, key: str, per_s: float) -> float:
        if connection.in_atomic_block:
            # Counted here, the row lock would last until the caller's transaction ends and
            # hold up every other process's calls to this ZVM meanwhile. ZVM calls are not
            # made inside transactions by design; one that is counts in this process.
            return LOCAL_PACER.reserve(key, per_s)
        n, window = window_shape(per_s)
        sql = _pacer_sql(connection.vendor)
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(sql.read, [key])
                found = cursor.fetchone()
                now = time.time()
                recent = [float(t) for t in (found[0] if found else self._created(key)).split()]
                slot = next_slot(recent, now, n, window)
                kept = ([*recent, slot])[-n:]
                cursor.execute(sql.write, [" ".join(f"{t:.6f}" for t in kept), key])
        except DatabaseError as exc:
            logger.warning(
                "a ZVM request cap is counted per process for this call: the database did not answer (%s)",
                type(exc).__name__,
            )
            return LOCAL_PACER.reserve(key, per_s)
        # Counted from now, after the commit: a commit that waited for the write lock must not
        # be slept on top of the slot, or the sender arrives in the next window, over the cap;
        # one that ended after the slot says by how much (the sender then takes another).
        return slot - time.time()

    @staticmethod
    def _created(key: str) -> str:
        """The ``recent`` of the ZVM's new row, locked: created here, or by whoever won the race."""
        try:
            with transaction.atomic():  # a savepoint: losing the race to create it is not an error
                return ZvmRateWindow.objects.create(key=key).recent
        except IntegrityError:
            return ZvmRateWindow.objects.select_for_update().get(key=key).recent


@dataclass(frozen=True)
class _PacerSql:
    read: str  # the ZVM's recent send times, its row locked until the transaction ends
    write: str


@cache
def _pacer_sql(vendor: str) -> _PacerSql:
    """Every ZVM request runs these two: plain SQL, as the ORM's statement building cost more than
    the statements (measured: 1.1 ms a reservation through the ORM, SQLite)."""
    quote = connection.ops.quote_name
    table = quote(ZvmRateWindow._meta.db_table)
    column_of = {f.name: f.column or f.name for f in ZvmRateWindow._meta.concrete_fields}
    key, recent = quote(column_of["key"]), quote(column_of["recent"])
    lock = " FOR UPDATE" if connection.features.has_select_for_update else ""
    return _PacerSql(
        read=f"SELECT {recent} FROM {table} WHERE {key} = %s{lock}",
        write=f"UPDATE {table} SET {recent} = %s WHERE {key} = %s",
    )


def _sealed(token: StoredToken) -> str:
    return json.dumps({"token": encrypt(token.token), "expires_at": token.expires_at, "lifetime": token.lifetime})


def _opened(raw: bytes | str | None) -> StoredToken | None:
    """The token in a stored value, or None (absent, malformed, or sealed under another key)."""
    if not raw:
        return None
    try:
        data = json.loads(raw)
        return StoredToken(
            token=decrypt(data["token"]), expires_at=float(data["expires_at"]), lifetime=float(data["lifetime"])
        )
    except (ValueError, KeyError, TypeError, DecryptionError):
        return None


class RedisTokenStore:
    """Tokens in Redis, encrypted, each expiring with the token; logins claimed with SET NX."""

    def __init__(self, link: RedisLink) -> None:
        self._link = link
        self._delete_if_same = link.client.register_script(_DELETE_IF_SAME)

    def get(self, key: str) -> StoredToken | None:
        if not self._link.up():
            return None
        try:
            return _opened(self._link.client.get(TOKEN_PREFIX + key))
        except REDIS_DOWN as exc:
            self._link.failed(exc, "ZVM tokens are kept")
            return None

    def put(self, key: str, token: StoredToken) -> None:
        ttl_ms = int((token.expires_at - time.time()) * 1000)
        if ttl_ms <= 0 or not self._link.up():
            return
        try:
            pipe = self._link.client.pipeline()
            pipe.set(TOKEN_PREFIX + key, _sealed(token), px=ttl_ms)
            pipe.delete(CLAIM_PREFIX + key)
            pipe.execute()
        except REDIS_DOWN as exc:
            self._link.failed(exc, "ZVM tokens are kept")

    def discard(self, key: str, token: str) -> None:
        if not self._link.up():
            return
        try:
            raw = self._link.client.get(TOKEN_PREFIX + key)
            stored = _opened(raw)
            if raw is not None and stored is not None and stored.token == token:
                self._delete_if_same(keys=[TOKEN_PREFIX + key], args=[raw])
        except REDIS_DOWN as exc:
            self._link.failed(exc, "ZVM tokens are kept")

    def claim_login(self, key: str, ttl: float) -> bool:
        if not self._link.up():
            return True
        try:
            return bool(self._link.client.set(CLAIM_PREFIX + key, b"1", nx=True, px=max(1, int(ttl * 1000))))
        except REDIS_DOWN as exc:
            self._link.failed(exc, "ZVM tokens are kept")
            return True

    def release_login(self, key: str) -> None:
        if not self._link.up():
            return
        try:
            self._link.client.delete(CLAIM_PREFIX + key)
        except REDIS_DOWN as exc:
            self._link.failed(exc, "ZVM tokens are kept")


class DbTokenStore:
    """Tokens in ``ZvmToken`` rows, encrypted; logins claimed by a compare-and-swap on the row."""

    def get(self, key: str) -> StoredToken | None:
        try:
            row = ZvmToken.objects.filter(key=key).values_list("token_encrypted", "expires_at", "lifetime").first()
        except DatabaseError as exc:
            self._failed(exc)
            return None
        if row is None or not row[0]:
            return None
        try:
            return StoredToken(token=decrypt(row[0]), expires_at=row[1], lifetime=row[2])
        except DecryptionError:
            return None  # sealed under an earlier key: log in again and overwrite it

    def put(self, key: str, token: StoredToken) -> None:
        values = {
            "token_encrypted": encrypt(token.token),
            "expires_at": token.expires_at,
            "lifetime": token.lifetime,
            "login_claimed_until": 0.0,
        }
        try:
            stored = ZvmToken.objects.filter(key=key).update(**values) or self._create(key, **values)
            if not stored:  # another process created the row between the two statements
                ZvmToken.objects.filter(key=key).update(**values)
        except DatabaseError as exc:
            self._failed(exc)

    def discard(self, key: str, token: str) -> None:
        try:
            sealed = ZvmToken.objects.filter(key=key).values_list("token_encrypted", flat=True).first()
            if sealed and decrypt(sealed) == token:
                # Only if unchanged since we read it: another process may have stored a new token.
                ZvmToken.objects.filter(key=key, token_encrypted=sealed).update(token_encrypted="", expires_at=0.0)
        except DecryptionError:
            return
        except DatabaseError as exc:
            self._failed(exc)

    def claim_login(self, key: str, ttl: float) -> bool:
        now = time.time()
        try:
            if ZvmToken.objects.filter(key=key, login_claimed_until__lt=now).update(login_claimed_until=now + ttl):
                return True
            return self._create(key, login_claimed_until=now + ttl)
        except DatabaseError as exc:
            self._failed(exc)
            return True

    def release_login(self, key: str) -> None:
        try:
            ZvmToken.objects.filter(key=key).update(login_claimed_until=0.0)
        except DatabaseError as exc:
            self._failed(exc)

    @staticmethod
    def _create(key: str, **values: object) -> bool:
        """Create the row; False when another process created it first."""
        try:
            with transaction.atomic():
                ZvmToken.objects.create(key=key, **values)
        except IntegrityError:
            return False
        return True

    @staticmethod
    def _failed(exc: BaseException) -> None:
        logger.warning(
            "a ZVM token is kept per process for this call: the database did not answer (%s)", type(exc).__name__
        )


_LOCK = threading.Lock()


@lru_cache(maxsize=4)
def redis_stores(url: str) -> tuple[RedisPacer, RedisTokenStore, RedisBreaker, BatchedRequestCounter]:
    """The pacer, token store, circuits and request counter on the Redis at ``url``, one set (and one client) per URL."""
    link = RedisLink(url, logger=logger)
    requests = BatchedRequestCounter(RedisRequestCounter(link.client))
    _COUNTERS.append(requests)
    return RedisPacer(link), RedisTokenStore(link), RedisBreaker(link), requests


_DB_BREAKER = DbBreaker()
_DB_REQUESTS = BatchedRequestCounter(DbRequestCounter())
_COUNTERS = [_DB_REQUESTS]  # every request counter of this process


def request_counts_flush() -> None:
    """Write every request count this process holds now, not when its timer comes (tests; a process leaving)."""
    for counter in list(_COUNTERS):
        counter.flush()


def request_counter() -> BatchedRequestCounter:
    """Where every process counts its ZVM requests (``rewind.sites.requestcount``), and ``/metrics`` reads them."""
    url = settings.ZVM_SHARED_REDIS_URL
    if url:
        with _LOCK:
            return redis_stores(url)[3]
    return _DB_REQUESTS


def shared_breaker() -> SharedBreaker:
    """The site circuits every process shares (``rewind.sites.circuit``)."""
    url = settings.ZVM_SHARED_REDIS_URL
    if url:
        with _LOCK:
            return redis_stores(url)[2]
    return _DB_BREAKER


def shared_stores() -> Stores:
    """The stores every ``shared_client`` of this process uses (Redis when configured, else the database)."""
    url = settings.ZVM_SHARED_REDIS_URL
    if url:
        with _LOCK:
            pacer, tokens, breaker, requests = redis_stores(url)
        return Stores(pacer=pacer, tokens=tokens, breaker=breaker, requests=requests)
    return Stores(pacer=DbPacer(), tokens=DbTokenStore(), breaker=_DB_BREAKER, requests=_DB_REQUESTS)
