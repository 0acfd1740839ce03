"""Apprise URLs as secrets: is one valid, how it may be shown, and which parts of it must never be.

A notification URL carries its credentials (``json://user:password@host``, a Slack webhook's
tokens, an SMTP password). Apprise knows which parts are private: its "privacy" form of a
URL masks them. Whatever the URL holds that its privacy form does not show is treated as a
secret here, and cut out of every text we store, audit or log (``redact``).

No Django models here: ``rewind.settings`` validates URLs through this module. Apprise is
imported only when a URL is given (it takes a fifth of a second), so a deployment without
notifications does not pay for it.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

MASK = "****"
# Tokens of a URL: what stands between its delimiters.
_DELIMITERS = re.compile(r"[/:@?&=#,;+\s]+")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]{0,31})://")
# Shorter pieces are not secrets worth the noise of masking them everywhere.
_MIN_SECRET = 3
LABEL_MAX = 300


@dataclass(frozen=True)
class UrlInfo:
    """What may be said of one valid URL: its label (credentials masked) and its secret parts."""

    label: str
    secrets: tuple[str, ...]


class _DropAll(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return False


@contextmanager
def apprise_quiet() -> Iterator[None]:
    """Silence Apprise's own log while it parses a URL it may not accept.

    It logs a rejected URL with part of its password ("Unparseable URL jsn://u:S...d@host"),
    and at start-up nothing would redact that yet.
    """
    drop = _DropAll()
    log = logging.getLogger("apprise")
    log.addFilter(drop)
    try:
        yield
    finally:
        log.removeFilter(drop)


def scheme_of(url: str) -> str:
    """The URL's scheme when it looks like one (safe to name in an error), else ""."""
    found = _SCHEME.match(url)
    return found.group(1).lower() if found else ""


def _instantiate(url: str) -> Any:
    import apprise

    with apprise_quiet():
        return apprise.Apprise.instantiate(url, asset=asset())


@functools.cache
def asset() -> Any:
    """How we present ourselves to the services; nothing is written to disk."""
    import apprise

    return apprise.AppriseAsset(app_id="zerto-rewind", app_desc="zerto-rewind", storage_mode="memory")


@functools.lru_cache(maxsize=256)
def describe(url: str) -> UrlInfo | None:
    """The label and secret parts of ``url``, or None when Apprise does not accept it."""
    plugin = _instantiate(url)
    if plugin is None:
        return None
    privacy = str(plugin.url(privacy=True))
    return UrlInfo(label=_label(privacy), secrets=_secrets(url, privacy))


def _label(privacy: str) -> str:
    # The query holds Apprise's defaults (method=POST&retry=0…): noise in a list of channels.
    text = privacy.split("?", 1)[0].rstrip("/")
    return text if len(text) <= LABEL_MAX else text[: LABEL_MAX - 1] + "…"


def _tokens(text: str) -> set[str]:
    body = text.split("://", 1)[-1]
    return {t for t in _DELIMITERS.split(body) if t}


def _secrets(url: str, privacy: str) -> tuple[str, ...]:
    shown = _tokens(privacy) | {unquote(t) for t in _tokens(privacy)}
    found: set[str] = set()
    for token in _tokens(url):
        for form in (token, unquote(token)):
            if len(form) >= _MIN_SECRET and form not in shown:
                found.add(form)
    # Longest first, so a secret containing another is masked whole.
    return tuple(sorted(found, key=lambda s: (-len(s), s)))


def redact(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every secret part masked."""
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, MASK)
    return text


def rough_secrets(urls: Iterable[str]) -> tuple[str, ...]:
    """Every part of ``urls`` but their schemes: what to mask when Apprise cannot tell which are secret."""
    found = {form for url in urls for t in _tokens(url) for form in (t, unquote(t)) if len(form) >= _MIN_SECRET}
    return tuple(sorted(found, key=lambda s: (-len(s), s)))


def secrets_of(urls: Iterable[str]) -> tuple[str, ...]:
    """Every secret part of ``urls``; a URL Apprise does not accept is masked whole but for its scheme."""
    found: set[str] = set()
    for url in urls:
        info = describe(url)
        found.update(info.secrets if info is not None else rough_secrets([url]))
    return tuple(sorted(found, key=lambda s: (-len(s), s)))
