"""Every process's view of each site's circuit breaker (``rewind.zvm.breaker``), and its audit.

Picked with the other shared stores by ``rewind.sites.zvm_shared.shared_stores``:
- Redis, when ``REDIS_URL`` is set: one hash per site, changed in WATCH/MULTI transactions;
  while Redis does not answer, each process keeps its own circuits (``_LOCAL``);
- the database otherwise: one ``SiteCircuit`` row per site, changed under a row lock. A
  call's admission reads the site's ``enabled`` in the same query, so disabling a site
  stops every process's calls to it at once.

Keys are site ids (``ZvmConnection.circuit_key``). Every open and close is audited
(``site.unavailable`` / ``site.available``) unless one was audited for the site within
``ZVM_CIRCUIT_AUDIT_QUIET_S``: then it is only counted, and the next audited one (or the
probe's catch-up, ``circuit_audit_catch_up``) says how many flaps it summarises.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from typing import Any, Protocol

from django.conf import settings
from django.db import DatabaseError, IntegrityError, connection, transaction
from redis.exceptions import RedisError, WatchError
from redis.typing import EncodableT, FieldT

from rewind.audit import Actor, audit_record
from rewind.audit.actions import SiteAction
from rewind.redislink import REDIS_DOWN, RedisLink
from rewind.sites.models import Site, SiteCircuit
from rewind.zvm import CircuitPolicy, CircuitState, MemoryBreaker
from rewind.zvm.breaker import OPEN, Transition, answered_state, failed_state

logger = logging.getLogger(__name__)
CIRCUIT_PREFIX = "rewind:zvm:circuit:"


def circuit_policy() -> CircuitPolicy:
    return CircuitPolicy(
        failures=settings.ZVM_CIRCUIT_FAILURES,
        probe_s=settings.ZVM_CIRCUIT_PROBE_S,
        probe_max_s=max(settings.ZVM_CIRCUIT_PROBE_S, settings.ZVM_CIRCUIT_PROBE_MAX_S),
    )


# While the shared store does not answer, circuits are kept per process.
_LOCAL = MemoryBreaker(circuit_policy)


@dataclass(frozen=True)
class AuditBook:
    """What the audit log last said about a site's circuit, and the flaps since."""

    state: str = "closed"
    at: float = 0.0
    flaps: int = 0


def _book_after(book: AuditBook, t: Transition, now: float) -> tuple[AuditBook, bool]:
    """The audit bookkeeping after transition ``t``, and whether to audit it now."""
    if not (t.opened or t.closed):
        return book, False
    if now - book.at >= settings.ZVM_CIRCUIT_AUDIT_QUIET_S:
        return AuditBook(t.state.state, now, 0), True
    return replace(book, flaps=book.flaps + 1), False


def _audit(site_pk: int, state: CircuitState, flaps: int, *, summary: bool = False) -> None:
    site = Site.objects.filter(pk=site_pk).first()
    if site is None:
        return
    data: dict[str, Any] = {"flaps_since_last": flaps}
    if state.is_open:
        action = SiteAction.UNAVAILABLE
        data.update(
            since=datetime.fromtimestamp(state.opened_at, UTC).isoformat(), reason=state.reason, failures=state.failures
        )
    else:
        action = SiteAction.AVAILABLE
    if summary:
        data["summary"] = True
    try:
        audit_record(actor=Actor.system(), action=action, target=site, data=data)
    except DatabaseError as exc:
        logger.warning("site %s: could not audit its circuit (%s)", site.name, type(exc).__name__)


def _log(site_name: str, t: Transition) -> None:
    if t.opened:
        logger.warning(
            "site %s is unavailable: %s (calls fail at once until a probe gets an answer)", site_name, t.state.reason
        )
    elif t.closed:
        logger.info("site %s answers again", site_name)


def _site_pk(key: str) -> int | None:
    return int(key) if key.isdigit() else None


class SharedBreaker(Protocol):
    def admit(self, key: str) -> CircuitState | None: ...
    def failed(self, key: str, site_name: str, reason: str, *, at_once: bool) -> CircuitState: ...
    def answered(self, key: str, site_name: str) -> None: ...
    def state(self, key: str) -> CircuitState: ...
    def set_disabled(self, key: str, disabled: bool) -> None: ...
    def book(self, key: str) -> AuditBook: ...
    def set_book(self, key: str, book: AuditBook) -> None: ...
    def forget(self, key: str) -> None: ...


# --- Redis -----------------------------------------------------------------------------------
_FIELDS = ("state", "failures", "opened_at", "reason", "next_trial_at", "opens", "disabled")


# What a Redis hash reads as: bytes from our clients (they do not decode), str from one that does.
RedisHash = Mapping[bytes | str, bytes | str]


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _decoded(raw: RedisHash) -> dict[str, str]:
    return {_text(k): _text(v) for k, v in raw.items()}


def _state_of(raw: RedisHash) -> CircuitState:
    h = _decoded(raw)
    return CircuitState(
        state=h.get("state", "closed"),
        failures=int(h.get("failures", 0)),
        opened_at=float(h.get("opened_at", 0)),
        reason=h.get("reason", ""),
        next_trial_at=float(h.get("next_trial_at", 0)),
        opens=int(h.get("opens", 0)),
        disabled=h.get("disabled") == "1",
    )


def _book_of(raw: RedisHash) -> AuditBook:
    h = _decoded(raw)
    return AuditBook(h.get("audited_state", "closed"), float(h.get("audited_at", 0)), int(h.get("flaps", 0)))


def _mapping(s: CircuitState, book: AuditBook | None = None) -> dict[FieldT, EncodableT]:
    out: dict[FieldT, EncodableT] = {k: str(v) for k, v in asdict(s).items() if k != "disabled"}
    out["disabled"] = "1" if s.disabled else "0"
    if book is not None:
        out.update(audited_state=book.state, audited_at=str(book.at), flaps=str(book.flaps))
    return out


class RedisBreaker:
    """Circuits in Redis hashes; a transition is one optimistic transaction, so one process makes it."""

    def __init__(self, link: RedisLink) -> None:
        self._link = link

    def _change(self, key: str, change: Any) -> Any:
        """Run ``change(state, book, now) -> (state, book, result)`` atomically on the hash."""
        name = CIRCUIT_PREFIX + key
        client = self._link.client
        with client.pipeline() as pipe:
            for _ in range(20):
                try:
                    pipe.watch(name)
                    raw = pipe.hgetall(name)
                    new, book, result = change(_state_of(raw), _book_of(raw), time.time())
                    pipe.multi()
                    if new is not None:
                        pipe.hset(name, mapping=_mapping(new, book))
                    pipe.execute()
                    return result
                except WatchError:
                    continue
        raise RedisError("the circuit kept changing under us")

    def admit(self, key: str) -> CircuitState | None:
        if not self._link.up():
            return _LOCAL.admit(key)
        try:
            raw = self._link.client.hgetall(CIRCUIT_PREFIX + key)
            s = _state_of(raw)
            if s.disabled:
                return s
            if not s.is_open:
                return None
            if time.time() < s.next_trial_at:
                return s

            def claim(cur: CircuitState, book: AuditBook, now: float) -> Any:
                if not cur.is_open:
                    return None, book, None
                if now < cur.next_trial_at:
                    return None, book, cur
                return replace(cur, next_trial_at=now + circuit_policy().period(cur.opens)), book, None

            return self._change(key, claim)
        except REDIS_DOWN as exc:
            self._link.failed(exc, "site circuits are kept")
            return _LOCAL.admit(key)

    def failed(self, key: str, site_name: str, reason: str, *, at_once: bool) -> CircuitState:
        if not self._link.up():
            return _LOCAL.failed(key, site_name, reason, at_once=at_once)
        try:

            def change(cur: CircuitState, book: AuditBook, now: float) -> Any:
                t = failed_state(cur, circuit_policy(), reason, at_once, now)
                new_book, audit = _book_after(book, t, now)
                return t.state, new_book, (t, new_book, audit)

            t, book, audit = self._change(key, change)
        except REDIS_DOWN as exc:
            self._link.failed(exc, "site circuits are kept")
            return _LOCAL.failed(key, site_name, reason, at_once=at_once)
        _after(key, site_name, t, book, audit)
        return t.state

    def answered(self, key: str, site_name: str) -> None:
        if not self._link.up():
            _LOCAL.answered(key, site_name)
            return
        try:
            raw = self._link.client.hmget(CIRCUIT_PREFIX + key, "state", "failures")
            if raw[0] in (None, b"closed") and raw[1] in (None, b"0"):
                return  # the common case: one read, no write

            def change(cur: CircuitState, book: AuditBook, now: float) -> Any:
                t = answered_state(cur)
                new_book, audit = _book_after(book, t, now)
                return t.state, new_book, (t, new_book, audit)

            t, book, audit = self._change(key, change)
        except REDIS_DOWN as exc:
            self._link.failed(exc, "site circuits are kept")
            _LOCAL.answered(key, site_name)
            return
        _after(key, site_name, t, book, audit)

    def state(self, key: str) -> CircuitState:
        try:
            return _state_of(self._link.client.hgetall(CIRCUIT_PREFIX + key))
        except REDIS_DOWN:
            return _LOCAL.state(key)

    def book(self, key: str) -> AuditBook:
        try:
            return _book_of(self._link.client.hgetall(CIRCUIT_PREFIX + key))
        except REDIS_DOWN:
            return AuditBook()

    def set_book(self, key: str, book: AuditBook) -> None:
        try:
            self._link.client.hset(
                CIRCUIT_PREFIX + key,
                mapping={"audited_state": book.state, "audited_at": str(book.at), "flaps": str(book.flaps)},
            )
        except REDIS_DOWN as exc:
            self._link.failed(exc, "site circuits are kept")

    def set_disabled(self, key: str, disabled: bool) -> None:
        try:
            self._link.client.hset(CIRCUIT_PREFIX + key, "disabled", "1" if disabled else "0")
        except REDIS_DOWN as exc:
            self._link.failed(exc, "site circuits are kept")

    def forget(self, key: str) -> None:
        try:
            self._link.client.delete(CIRCUIT_PREFIX + key)
        except REDIS_DOWN as exc:
            self._link.failed(exc, "site circuits are kept")


# --- the database ----------------------------------------------------------------------------
_COLUMNS = ("state", "failures", "opened_at", "reason", "next_trial_at", "opens")


def _row_state(row: SiteCircuit | None, enabled: bool = True) -> CircuitState:
    if row is None:
        return CircuitState(disabled=not enabled)
    return CircuitState(
        state=row.state,
        failures=row.failures,
        opened_at=row.opened_at,
        reason=row.reason,
        next_trial_at=row.next_trial_at,
        opens=row.opens,
        disabled=not enabled,
    )


@dataclass(frozen=True)
class _HotSql:
    admission: str  # the site's enabled flag and its circuit, one row or none
    not_clean: str  # a row when the circuit is anything but closed with no failures


@functools.cache
def _hot_sql(vendor: str) -> _HotSql:
    """The two reads every ZVM call makes, as plain SQL: through the ORM, building them cost
    several times what the database spends answering (measured: 0.5 ms a call each, SQLite)."""
    quote = connection.ops.quote_name
    site, circuit = quote(Site._meta.db_table), quote(SiteCircuit._meta.db_table)

    def col(model: Any, name: str) -> str:
        return quote(model._meta.get_field(name).column)

    site_id = col(SiteCircuit, "site")
    return _HotSql(
        admission=(
            f"SELECT s.{col(Site, 'enabled')}, c.{col(SiteCircuit, 'state')}, c.{col(SiteCircuit, 'next_trial_at')}, "
            f"c.{col(SiteCircuit, 'opens')} FROM {site} s LEFT JOIN {circuit} c ON c.{site_id} = s.{col(Site, 'id')} "
            f"WHERE s.{col(Site, 'id')} = %s"
        ),
        not_clean=(
            f"SELECT 1 FROM {circuit} WHERE {site_id} = %s "
            f"AND NOT ({col(SiteCircuit, 'state')} = 'closed' AND {col(SiteCircuit, 'failures')} = 0)"
        ),
    )


def _fetch_one(sql: str, params: list[Any]) -> tuple[Any, ...] | None:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone()


class DbBreaker:
    """Circuits in ``SiteCircuit`` rows; a call's admission is one read (with the site's ``enabled``)."""

    def admit(self, key: str) -> CircuitState | None:
        pk = _site_pk(key)
        if pk is None:
            return _LOCAL.admit(key)
        try:
            row = _fetch_one(_hot_sql(connection.vendor).admission, [pk])
            if row is None:
                return None
            enabled, state, next_trial_at, opens = row
            if not enabled:  # SQLite answers 0 or 1
                return self.state(key)
            if state != OPEN:
                return None
            now = time.time()
            if now < next_trial_at:
                return self.state(key)
            # The period's one trial: whoever moves next_trial_at on first.
            won = SiteCircuit.objects.filter(site_id=pk, state=OPEN, next_trial_at=next_trial_at).update(
                next_trial_at=now + circuit_policy().period(opens)
            )
            return None if won else self.state(key)
        except DatabaseError as exc:
            logger.warning(
                "a site circuit is kept per process for this call: the database did not answer (%s)", type(exc).__name__
            )
            return _LOCAL.admit(key)

    def _change(self, pk: int, change: Any) -> Any:
        with transaction.atomic():
            row = SiteCircuit.objects.select_for_update().filter(site_id=pk).first()
            if row is None:
                try:
                    with transaction.atomic():
                        row = SiteCircuit.objects.create(site_id=pk)
                except IntegrityError:
                    row = SiteCircuit.objects.select_for_update().get(site_id=pk)
            book = AuditBook(row.audited_state, row.audited_at, row.flaps)
            new, new_book, result = change(_row_state(row), book, time.time())
            if new is not None:
                SiteCircuit.objects.filter(site_id=pk).update(
                    **{c: getattr(new, c) for c in _COLUMNS},
                    audited_state=new_book.state,
                    audited_at=new_book.at,
                    flaps=new_book.flaps,
                )
            return result

    def failed(self, key: str, site_name: str, reason: str, *, at_once: bool) -> CircuitState:
        pk = _site_pk(key)
        if pk is None:
            return _LOCAL.failed(key, site_name, reason, at_once=at_once)

        def change(cur: CircuitState, book: AuditBook, now: float) -> Any:
            t = failed_state(cur, circuit_policy(), reason[:2000], at_once, now)
            new_book, audit = _book_after(book, t, now)
            return t.state, new_book, (t, new_book, audit)

        try:
            t, book, audit = self._change(pk, change)
        except (DatabaseError, Site.DoesNotExist) as exc:
            logger.warning("a site circuit is kept per process for this call: %s", type(exc).__name__)
            return _LOCAL.failed(key, site_name, reason, at_once=at_once)
        _after(key, site_name, t, book, audit)
        return t.state

    def answered(self, key: str, site_name: str) -> None:
        pk = _site_pk(key)
        if pk is None:
            _LOCAL.answered(key, site_name)
            return
        try:
            if _fetch_one(_hot_sql(connection.vendor).not_clean, [pk]) is None:
                return  # the common case: one read, no write

            def change(cur: CircuitState, book: AuditBook, now: float) -> Any:
                t = answered_state(cur)
                new_book, audit = _book_after(book, t, now)
                return t.state, new_book, (t, new_book, audit)

            t, book, audit = self._change(pk, change)
        except DatabaseError as exc:
            logger.warning("a site circuit is kept per process for this call: %s", type(exc).__name__)
            _LOCAL.answered(key, site_name)
            return
        _after(key, site_name, t, book, audit)

    def state(self, key: str) -> CircuitState:
        pk = _site_pk(key)
        if pk is None:
            return _LOCAL.state(key)
        site = Site.objects.filter(pk=pk).values_list("enabled", flat=True).first()
        return _row_state(SiteCircuit.objects.filter(site_id=pk).first(), enabled=site is not False)

    def book(self, key: str) -> AuditBook:
        row = SiteCircuit.objects.filter(site_id=_site_pk(key) or 0).first()
        return AuditBook() if row is None else AuditBook(row.audited_state, row.audited_at, row.flaps)

    def set_book(self, key: str, book: AuditBook) -> None:
        SiteCircuit.objects.filter(site_id=_site_pk(key) or 0).update(
            audited_state=book.state, audited_at=book.at, flaps=book.flaps
        )

    def set_disabled(self, key: str, disabled: bool) -> None:
        """Nothing to do: the admission reads ``Site.enabled`` itself."""

    def forget(self, key: str) -> None:
        SiteCircuit.objects.filter(site_id=_site_pk(key) or 0).delete()


def _after(key: str, site_name: str, t: Transition, book: AuditBook, audit: bool) -> None:
    _log(site_name, t)
    pk = _site_pk(key)
    if audit and pk is not None:
        _audit(pk, t.state, 0)


def circuit_audit_catch_up(breaker: SharedBreaker, site: Site) -> bool:
    """Audit the site's circuit when the log last said otherwise and the quiet time is over.

    So a site that flapped within the quiet time and came to rest is still recorded as it is,
    with the count of flaps not audited one by one. Called by the probe. True when it audited.
    """
    key = str(site.pk)
    state, book, now = breaker.state(key), breaker.book(key), time.time()
    current = OPEN if state.is_open else "closed"
    if book.state == current and not book.flaps:
        return False
    if now - book.at < settings.ZVM_CIRCUIT_AUDIT_QUIET_S:
        return False
    breaker.set_book(key, AuditBook(current, now, 0))
    _audit(site.pk, state, book.flaps, summary=True)
    return True


def clear_local_circuits() -> None:
    """Forget the circuits kept per process while the shared store was down (tests)."""
    _LOCAL.clear()


def clear_local_circuit(key: str) -> None:
    """Forget the circuit this process kept for ``key`` while the shared store was down."""
    _LOCAL.forget(key)
