"""Per-site circuit breaker: a ZVM that stopped answering is not asked again on every call (docs/operations.md,
"One stuck ZVM").

A failure is a call with no usable answer (no answer, a 5xx, a TLS failure, our credentials refused, a 2xx that
is not what the API documents); a 404, 400 or 429 is an answer. ``Breaker`` is what the client needs; this
library ships ``MemoryBreaker``, and the shared ones come in through ``Stores``. Times are wall-clock seconds,
since other processes read them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

from .errors import (
    ZvmAuthError,
    ZvmError,
    ZvmSiteUnavailable,
    ZvmTlsError,
    ZvmTransientError,
    ZvmUnparseableResponse,
)

CLOSED, OPEN = "closed", "open"


@dataclass(frozen=True)
class CircuitPolicy:
    failures: int = 3  # consecutive failures that open the circuit
    probe_s: float = 30.0  # the first trial comes this long after it opened
    probe_max_s: float = 300.0  # the period doubles per failed trial, up to this

    def period(self, opens: int) -> float:
        return min(self.probe_max_s, self.probe_s * 2 ** max(0, opens - 1))


@dataclass(frozen=True)
class CircuitState:
    """One site's circuit as every process sees it."""

    state: str = CLOSED
    failures: int = 0
    opened_at: float = 0.0  # wall clock; when it last went from closed to open
    reason: str = ""  # the last failure, in plain words
    next_trial_at: float = 0.0  # wall clock; while open, the earliest trial call
    opens: int = 0  # failed trials since it opened (sets the period)
    disabled: bool = False  # the site was disabled by a person

    @property
    def is_open(self) -> bool:
        return self.state == OPEN


@dataclass(frozen=True)
class Transition:
    """What ``failed``/``answered`` changed: whether it opened or closed the circuit just now."""

    state: CircuitState
    opened: bool = False
    closed: bool = False


def counts_against_site(exc: ZvmError) -> bool:
    """Whether ``exc`` says the ZVM gave no usable answer (see the module docstring)."""
    if isinstance(exc, ZvmSiteUnavailable):
        return False
    if isinstance(exc, (ZvmTlsError, ZvmAuthError, ZvmUnparseableResponse)):
        return True
    if isinstance(exc, ZvmTransientError):
        return exc.status is None or exc.status >= 500  # not 429: a busy ZVM answers
    return False


def opens_at_once(exc: ZvmError) -> bool:
    """A timeout: it cost the whole timeout already, so one is enough."""
    return bool(getattr(exc, "timed_out", False))


def failed_state(s: CircuitState, policy: CircuitPolicy, reason: str, at_once: bool, now: float) -> Transition:
    """The rule for one failure (shared by every store)."""
    if s.is_open:  # a failed trial: the next one waits longer
        opens = s.opens + 1
        new = replace(
            s,
            reason=reason,
            opens=opens,
            failures=s.failures + 1,
            next_trial_at=max(s.next_trial_at, now + policy.period(opens)),
        )
        return Transition(new)
    failures = s.failures + 1
    if at_once or failures >= policy.failures:
        new = replace(
            s,
            state=OPEN,
            failures=failures,
            opened_at=now,
            reason=reason,
            opens=1,
            next_trial_at=now + policy.period(1),
        )
        return Transition(new, opened=True)
    return Transition(replace(s, failures=failures, reason=reason))


def answered_state(s: CircuitState) -> Transition:
    """The rule for one answer: the circuit closes and the count starts again."""
    new = replace(s, state=CLOSED, failures=0, opens=0, next_trial_at=0.0)
    return Transition(new, closed=s.is_open)


def refusal(site_name: str, s: CircuitState, *, base_url: str | None = None) -> ZvmSiteUnavailable:
    if s.disabled:
        return ZvmSiteUnavailable(site_name, "the site is disabled here", base_url=base_url)
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(s.opened_at))
    message = (
        f"unavailable since {since} UTC after {s.failures} failed call(s); last: {s.reason}; "
        "calls to it fail at once until a probe gets an answer"
    )
    error = ZvmSiteUnavailable(site_name, message, base_url=base_url)
    error.since = s.opened_at
    error.reason = s.reason
    return error


class Breaker(Protocol):
    def admit(self, key: str) -> CircuitState | None:
        """None: the call may go (closed, or this caller holds the period's one trial); otherwise the open (or
        disabled) state that refuses it. A store that cannot answer admits: it must not stop ZVM calls."""
        ...

    def failed(self, key: str, site_name: str, reason: str, *, at_once: bool) -> CircuitState:
        """Count one failure; the state after it."""
        ...

    def answered(self, key: str, site_name: str) -> None:
        """The ZVM answered: close the circuit (or reset the count)."""
        ...


class MemoryBreaker:
    """The rule counted in this process only: without Django, and while a shared store is down."""

    def __init__(
        self, policy: CircuitPolicy | Callable[[], CircuitPolicy] | None = None, clock: Callable[[], float] = time.time
    ) -> None:
        """``policy``: the rule's numbers, or a callable read on every use (settings that may change)."""
        self._policy = policy or CircuitPolicy()
        self._clock = clock
        self._lock = threading.Lock()
        self._states: dict[str, CircuitState] = {}

    @property
    def policy(self) -> CircuitPolicy:
        return self._policy() if callable(self._policy) else self._policy

    def state(self, key: str) -> CircuitState:
        with self._lock:
            return self._states.get(key, CircuitState())

    def admit(self, key: str) -> CircuitState | None:
        with self._lock:
            s = self._states.get(key)
            if s is None or not s.is_open:
                return None
            now = self._clock()
            if now < s.next_trial_at:
                return s
            # This caller is the trial; the next one comes a period later unless it answers.
            self._states[key] = replace(s, next_trial_at=now + self.policy.period(s.opens))
            return None

    def failed(self, key: str, site_name: str, reason: str, *, at_once: bool) -> CircuitState:
        with self._lock:
            t = failed_state(self._states.get(key, CircuitState()), self.policy, reason, at_once, self._clock())
            self._states[key] = t.state
            return t.state

    def answered(self, key: str, site_name: str) -> None:
        with self._lock:
            s = self._states.get(key)
            if s is not None and (s.failures or s.is_open):
                self._states[key] = answered_state(s).state

    def clear(self) -> None:
        with self._lock:
            self._states.clear()

    def forget(self, key: str) -> None:
        with self._lock:
            self._states.pop(key, None)


# The breaker of clients handed no other: one per process, like ``pacing.LOCAL_PACER``.
LOCAL_BREAKER = MemoryBreaker()
