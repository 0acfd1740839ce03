"""The notification settings, read from the environment and checked with Apprise at start-up.

``REWIND_NOTIFY_URLS``: Apprise URLs told of every event, separated by spaces or newlines
(not commas: Apprise URLs may hold commas). ``REWIND_NOTIFY_SITE_URLS``: a JSON object
mapping a site's name (as in the admin) to more URLs told of that site's events, as a list
or one space-separated string. Both may come from a file (``NAME_FILE``), as secrets do.

A URL Apprise does not accept stops start-up with an error that names the setting, the
URL's position and its scheme, never the URL: it may hold a password. The values are kept
in containers whose ``repr`` hides them, because Django's debug page and ``diffsettings``
print every setting whose name does not look secret.
"""

from __future__ import annotations

import json

from django.core.exceptions import ImproperlyConfigured

from rewind.lib.env import env_secret
from rewind.notifications.apprise_urls import describe, scheme_of


class NotifyUrls(tuple[str, ...]):
    """Apprise URLs (secrets): shown only as a count."""

    def __repr__(self) -> str:
        return f"<{len(self)} notification URL(s), not shown>"


class SiteNotifyUrls(dict[str, NotifyUrls]):
    """Site name → its Apprise URLs: shown without the URLs."""

    def __repr__(self) -> str:
        return "<notification URLs of site(s) " + ", ".join(repr(name) for name in self) + ", not shown>"


def check_url(setting: str, url: str, where: str) -> None:
    """Raise ``ImproperlyConfigured`` naming ``setting`` unless Apprise accepts ``url``."""
    scheme = scheme_of(url)
    if not scheme:
        raise ImproperlyConfigured(
            f"{setting}: {where} is not a URL (scheme://…); separate several URLs by spaces, not commas"
        )
    if url.count("://") > 1:
        # Apprise would take "a://…,b://…" as one URL whose path holds the second, unmasked.
        raise ImproperlyConfigured(
            f"{setting}: {where} ({scheme}://…) holds more than one URL; separate URLs by spaces, not commas"
        )
    if describe(url) is None:
        raise ImproperlyConfigured(
            f"{setting}: {where} ({scheme}://…) is not a notification URL Apprise accepts; "
            "check its scheme and the fields that scheme needs"
        )


def _urls(setting: str, raw: str, site: str | None = None) -> NotifyUrls:
    urls = raw.split()
    for position, url in enumerate(urls, 1):
        where = f"URL {position}" + (f" of site {site!r}" if site is not None else "")
        check_url(setting, url, where)
    return NotifyUrls(urls)


def notify_urls_setting(name: str) -> NotifyUrls:
    """The URLs told of every event; empty when unset."""
    raw = env_secret(name)
    return _urls(name, raw) if raw else NotifyUrls()


def site_notify_urls_setting(name: str) -> SiteNotifyUrls:
    """Site name → URLs told of that site's events; empty when unset."""
    raw = env_secret(name)
    if not raw:
        return SiteNotifyUrls()
    try:
        data = json.loads(raw)
    except ValueError as exc:
        # The decoder's message says where, never what: the text may hold a password.
        where = f"line {exc.lineno}, column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else "its text"
        raise ImproperlyConfigured(
            f'{name} must be a JSON object such as {{"Site A": ["slack://…"]}}; it does not parse at {where}'
        ) from None
    if not isinstance(data, dict):
        raise ImproperlyConfigured(f'{name} must be a JSON object such as {{"Site A": ["slack://…"]}}')
    out = SiteNotifyUrls()
    for site, value in data.items():
        if isinstance(value, str):
            text = value
        elif isinstance(value, list) and all(isinstance(v, str) for v in value):
            text = " ".join(value)
        else:
            raise ImproperlyConfigured(f"{name}: site {site!r} needs a list of URLs or one string of them")
        urls = _urls(name, text, site=site)
        if urls:
            out[site.strip()] = urls
    return out
