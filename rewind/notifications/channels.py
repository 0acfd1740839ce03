"""Which channels hear an event: the Apprise URLs of the settings, and built-in channels parts register.

An Apprise channel is known by a key derived from its URL with the secret key (so equal URLs
are one channel, and the key gives nothing away); the URL itself never leaves the settings.
A built-in channel (the approver e-mail of ``recoveries``) is registered by its part when the
app is ready, names the event kinds it takes, and queues its own task for a recorded delivery.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

from django.conf import settings
from django.utils.crypto import salted_hmac

from rewind.notifications.apprise_urls import describe, rough_secrets, scheme_of, secrets_of

APPRISE_PREFIX = "apprise:"


@dataclass(frozen=True)
class QueuedDelivery:
    """A delivery recorded just now, as handed to a built-in channel's ``queue``."""

    pk: int
    target_type: str
    target_id: str
    request_id: str


@dataclass(frozen=True)
class BuiltinChannel:
    key: str
    label: str
    kinds: frozenset[str]
    queue: Callable[[QueuedDelivery], None] = field(repr=False, compare=False)


@dataclass(frozen=True)
class Channel:
    key: str
    label: str  # credentials masked
    url: str = field(default="", repr=False)  # the Apprise URL, a secret; "" for a built-in
    sites: frozenset[str] = frozenset()  # an Apprise URL only for these sites' events; empty: every event
    builtin: BuiltinChannel | None = None

    @property
    def scope(self) -> str:
        """Which events it hears, in words."""
        if self.builtin is not None:
            return ", ".join(sorted(self.builtin.kinds))
        if not self.sites:
            return "every event"
        return "events of site " + ", ".join(sorted(self.sites))

    def hears(self, kind: str, sites: Iterable[str]) -> bool:
        if self.builtin is not None:
            return kind in self.builtin.kinds
        return not self.sites or not self.sites.isdisjoint(sites)


_builtins: dict[str, BuiltinChannel] = {}
_lock = threading.Lock()


def builtin_channel_register(channel: BuiltinChannel) -> None:
    """Add (or replace) a built-in channel; parts call it from their ``AppConfig.ready``."""
    with _lock:
        _builtins[channel.key] = channel


def _builtin_list() -> list[BuiltinChannel]:
    with _lock:
        return list(_builtins.values())


@functools.lru_cache(maxsize=256)
def _apprise_key(url: str) -> str:
    return APPRISE_PREFIX + salted_hmac("rewind.notifications.channel", url).hexdigest()[:24]


def _apprise_channel(url: str, sites: frozenset[str]) -> Channel:
    info = describe(url)
    label = info.label if info is not None else f"{scheme_of(url) or '?'}://… (not accepted by Apprise)"
    return Channel(key=_apprise_key(url), label=label, url=url, sites=sites)


def _site_urls() -> dict[str, Sequence[str]]:
    return dict(getattr(settings, "REWIND_NOTIFY_SITE_URLS", {}) or {})


def _every_event_urls() -> Sequence[str]:
    return tuple(getattr(settings, "REWIND_NOTIFY_URLS", ()) or ())


def channels_configured() -> list[Channel]:
    """Every channel, each once: the Apprise URLs (a URL given for every event and for a site
    hears every event; one given for several sites hears each of them), then the built-ins."""
    found: dict[str, Channel] = {}
    for url in _every_event_urls():
        channel = _apprise_channel(url, frozenset())
        found.setdefault(channel.key, channel)
    for site, urls in sorted(_site_urls().items()):
        for url in urls:
            channel = _apprise_channel(url, frozenset({site}))
            known = found.get(channel.key)
            if known is None:
                found[channel.key] = channel
            elif known.sites:
                found[channel.key] = replace(known, sites=known.sites | {site})
    for builtin in _builtin_list():
        found.setdefault(builtin.key, Channel(builtin.key, builtin.label, builtin=builtin))
    configured_secrets()  # worked out now, before anything is sent, so the log filter has them
    return list(found.values())


def channels_for(kind: str, sites: Iterable[str] = ()) -> list[Channel]:
    """The channels that hear an event of ``kind`` about ``sites`` (site names, as in the admin)."""
    names = {s for s in sites if s}
    return [c for c in channels_configured() if c.hears(kind, names)]


def channel_get(key: str) -> Channel | None:
    return next((c for c in channels_configured() if c.key == key), None)


def configured_urls() -> tuple[str, ...]:
    """Every configured Apprise URL (secrets: for masking and sending only)."""
    return (*_every_event_urls(), *(u for urls in _site_urls().values() for u in urls))


_secrets_by_urls: dict[tuple[str, ...], tuple[str, ...]] = {}


def configured_secrets() -> tuple[str, ...]:
    """The secret parts of every configured URL (to mask in texts and logs); asks Apprise once per set of URLs."""
    urls = configured_urls()
    found = _secrets_by_urls.get(urls)
    if found is None:
        found = secrets_of(urls)
        with _lock:
            if len(_secrets_by_urls) >= 16:  # settings change only in tests; keep the map small anyway
                _secrets_by_urls.clear()
            _secrets_by_urls[urls] = found
    return found


def configured_secrets_known() -> tuple[str, ...]:
    """The secret parts without asking Apprise, for the log filter: Apprise logs while it parses
    and loads (under its own lock), so the filter must never call it. Until ``configured_secrets``
    has worked them out, every part of every URL counts as secret."""
    urls = configured_urls()
    found = _secrets_by_urls.get(urls)
    return found if found is not None else rough_secrets(urls)
