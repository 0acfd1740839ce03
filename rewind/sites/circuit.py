"""Every process's view of each site's circuit breaker (``rewind.zvm.breaker``), and its audit.

Every open and close is audited unless one was audited for the site within ``ZVM_CIRCUIT_AUDIT_QUIET_S``: a
flapping site is then only counted, and the next audited change says how many flaps it summarises.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection

from rewind.audit import Actor, audit_record
from rewind.audit.actions import SiteAction
from rewind.lib.sharedstore import Fallback, NotShared, Record, Records, SharedStore, column
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


def _state_of(h: Record) -> CircuitState:
    return CircuitState(
        state=h.get("state", "closed"),
        failures=int(h.get("failures", 0)),
        opened_at=float(h.get("opened_at", 0)),
        reason=h.get("reason", ""),
        next_trial_at=float(h.get("next_trial_at", 0)),
        opens=int(h.get("opens", 0)),
        disabled=h.get("disabled") == "1",
    )


def _book_of(h: Record) -> AuditBook:
    return AuditBook(h.get("audited_state", "closed"), float(h.get("audited_at", 0)), int(h.get("flaps", 0)))


def _book_fields(book: AuditBook) -> Record:
    return {"audited_state": book.state, "audited_at": str(book.at), "flaps": str(book.flaps)}


def _fields(s: CircuitState, book: AuditBook) -> Record:
    out = {k: str(v) for k, v in asdict(s).items() if k != "disabled"}
    return {**out, "disabled": "1" if s.disabled else "0", **_book_fields(book)}


def _row_key(key: str) -> int:
    if not key.isdigit():
        raise NotShared(key)  # a connection of no site (not saved yet): its circuit is this process's
    return int(key)


def _admission_sql() -> str:
    """A call's admission reads its site's ``enabled`` in the same query, so disabling a site stops every process's
    calls at once. Plain SQL: through the ORM it cost several times what the database spends answering
    (measured: see the benchmarks page)."""
    site, circuit = (connection.ops.quote_name(m._meta.db_table) for m in (Site, SiteCircuit))
    columns = ", ".join(f"c.{column(SiteCircuit, name)}" for name in _COLUMNS)
    site_id = column(Site, "id")
    return (
        f"SELECT {columns}, CASE WHEN s.{column(Site, 'enabled')} THEN '0' ELSE '1' END FROM {site} s "
        f"LEFT JOIN {circuit} c ON c.{column(SiteCircuit, 'site')} = s.{site_id} WHERE s.{site_id} = %s"
    )


_COLUMNS = (
    "state", "failures", "opened_at", "reason", "next_trial_at", "opens", "audited_state", "audited_at", "flaps"
)  # fmt: skip
# In Redis one hash per site, "disabled" among its fields; in the database one SiteCircuit row,
# "disabled" read from the site itself.
CIRCUITS = Records(
    CIRCUIT_PREFIX,
    SiteCircuit,
    _COLUMNS,
    key_field="site",
    row_key=_row_key,
    read_sql=_admission_sql,
    derived=("disabled",),
)


class SharedBreaker:
    """Every process's circuits in ``store``; a transition is one atomic change, so one process makes it.

    While the store does not answer (or cannot hold the key), circuits are kept per process.
    """

    def __init__(self, store: SharedStore) -> None:
        self._store = store
        self._fallback = Fallback(store, "site circuits are kept per process", logger)

    def admit(self, key: str) -> CircuitState | None:
        return self._fallback.call(lambda: self._admit(key), lambda: _LOCAL.admit(key))

    def _admit(self, key: str) -> CircuitState | None:
        s = _state_of(self._store.get(CIRCUITS, key))
        if s.disabled or (s.is_open and time.time() < s.next_trial_at):
            return s
        if not s.is_open:
            return None

        def claim(h: Record) -> tuple[Record | None, CircuitState | None]:
            cur, now = _state_of(h), time.time()
            if not cur.is_open:
                return None, None
            if now < cur.next_trial_at:
                return None, cur
            # The period's one trial: whoever moves next_trial_at on first.
            return {"next_trial_at": str(now + circuit_policy().period(cur.opens))}, None

        return self._store.change(CIRCUITS, key, claim)

    def failed(self, key: str, site_name: str, reason: str, *, at_once: bool) -> CircuitState:
        def change(h: Record) -> tuple[Record, tuple[Transition, bool]]:
            now = time.time()
            t = failed_state(_state_of(h), circuit_policy(), reason[:2000], at_once, now)
            book, audit = _book_after(_book_of(h), t, now)
            return _fields(t.state, book), (t, audit)

        done = self._fallback.call(lambda: self._store.change(CIRCUITS, key, change), lambda: None)
        if done is None:
            return _LOCAL.failed(key, site_name, reason, at_once=at_once)
        _after(key, site_name, *done)
        return done[0].state

    def answered(self, key: str, site_name: str) -> None:
        done = self._fallback.call(lambda: self._answered(key), lambda: _LOCAL.answered(key, site_name))
        if done is not None:
            _after(key, site_name, *done)

    def _answered(self, key: str) -> tuple[Transition, bool] | None:
        s = _state_of(self._store.get(CIRCUITS, key))
        if not s.is_open and not s.failures:
            return None  # the common case: one read, no write

        def change(h: Record) -> tuple[Record, tuple[Transition, bool]]:
            t = answered_state(_state_of(h))
            book, audit = _book_after(_book_of(h), t, time.time())
            return _fields(t.state, book), (t, audit)

        return self._store.change(CIRCUITS, key, change)

    def state(self, key: str) -> CircuitState:
        return self._fallback.call(lambda: _state_of(self._store.get(CIRCUITS, key)), lambda: _LOCAL.state(key))

    def book(self, key: str) -> AuditBook:
        return self._fallback.call(lambda: _book_of(self._store.get(CIRCUITS, key)), AuditBook)

    def set_book(self, key: str, book: AuditBook) -> None:
        self._fallback.call(lambda: self._store.put(CIRCUITS, key, _book_fields(book)), lambda: None)

    def set_disabled(self, key: str, disabled: bool) -> None:
        """In Redis; the database reads ``Site.enabled`` itself."""
        self._fallback.call(
            lambda: self._store.put(CIRCUITS, key, {"disabled": "1" if disabled else "0"}), lambda: None
        )

    def forget(self, key: str) -> None:
        self._fallback.call(lambda: self._store.delete(CIRCUITS, key), lambda: None)


def _after(key: str, site_name: str, t: Transition, audit: bool) -> None:
    _log(site_name, t)
    if audit and key.isdigit():
        _audit(int(key), t.state, 0)


def circuit_audit_catch_up(breaker: SharedBreaker, site: Site) -> bool:
    """Audit the site's circuit when the log last said otherwise and the quiet time is over, so a site that flapped
    and came to rest is still recorded as it is. Called by the probe; True when it audited."""
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
