"""Typed errors of the ZVM client.

Every error names the site and says what went wrong in plain words and never a secret (the client writes each
message and redacts what it did not write), so its ``str()`` may go to an operator, an audit row or an agent as
is. Callers decide on retries by class: only a ``ZvmTransientError`` may succeed later.
"""

from __future__ import annotations

from typing import Any


class ZvmError(Exception):
    """Base of every ZVM client error: ``site_name`` plus a plain-words ``message``; ``timed_out``: no answer in
    time."""

    timed_out = False
    circuit_counted = False  # already counted against the site's circuit (rewind.zvm.breaker)

    def __init__(
        self,
        site_name: str,
        message: str,
        *,
        base_url: str | None = None,
        status: int | None = None,
        zvm_message: str | None = None,
    ) -> None:
        # args stay (site_name, message) so the error survives pickling and Celery's
        # JSON result encoding, which rebuild it as cls(*args).
        super().__init__(site_name, message)
        self.site_name = site_name
        self.message = message
        self.base_url = base_url
        self.status = status
        self.zvm_message = zvm_message

    @property
    def where(self) -> str:
        return f"{self.site_name} ({self.base_url})" if self.base_url else self.site_name

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.site_name, self.message), self.__dict__.copy())


class ZvmTransientError(ZvmError):
    """The ZVM could not be reached or was busy (timeout, connection error, 5xx, 429): trying later may work; GETs
    were already retried a few times."""


class ZvmSiteUnavailable(ZvmTransientError):
    """The site's circuit is open (``rewind.zvm.breaker``) or the site is disabled here: the call was not sent.
    ``since`` is when it opened (None when disabled), ``reason`` the last failure."""

    since: float | None = None
    reason: str = ""


class ZvmRejectedError(ZvmError):
    """The ZVM answered with a 4xx: the request itself is wrong; repeating it will not help. ``status`` is the HTTP
    status, ``zvm_message`` the ZVM's ``Message`` when it sent one."""


class ZvmNotFoundError(ZvmRejectedError):
    """HTTP 404: the object (VPG, task, FLR session, ...) does not exist on that ZVM."""


class ZvmAuthError(ZvmRejectedError):
    """The ZVM rejected the credentials, or refused a fresh token right after a re-login."""


class ZvmUnparseableResponse(ZvmError):
    """The ZVM answered 2xx but the body is not what the API documents."""


class ZvmTlsError(ZvmError):
    """The TLS handshake failed (untrusted or mismatched certificate): a configuration problem, not transient."""
