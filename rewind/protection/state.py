"""The look-up's per-process state: its caches, the enabled sites, each site's client, its thread pool.

Whole answers are cached too, by query and sites' fingerprint: under load the same VMs are asked for again and
again, and rebuilding an answer from the caches cost more than the rest of the call. A site's client is kept
while its row is unchanged, so a hot look-up does not decrypt its password every call. DNS runs on a bounded
pool: ``getaddrinfo`` has no timeout, so a stuck one holds a thread until it returns.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from django.conf import settings
from django.db import connections

from rewind.lib.requestid import current_request_id
from rewind.protection.cache import MAX_ENTRIES, Miss, TtlCache, cache_only
from rewind.protection.fingerprint import SitesFingerprint, sites_fingerprint
from rewind.protection.results import Protection
from rewind.sites import site_client
from rewind.sites.models import Site
from rewind.zvm import ZvmClient


def _refresh_off_thread(job: Callable[[], None]) -> None:
    refresh_pool.submit(_closing_connections, job)


def _closing_connections(job: Callable[[], None]) -> None:
    """A refresh may count the ZVM cap in the database: its thread's connection is not kept open."""
    try:
        job()
    finally:
        connections.close_all()


# Two threads: a refresh waits behind the ZVM's cap, and one slow site must not hold up the rest.
refresh_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="rewind-lookup-refresh")
cache = TtlCache(background=_refresh_off_thread)
answers: dict[tuple[str, SitesFingerprint], tuple[float, Protection]] = {}
_clients: dict[int, tuple[tuple[Any, ...], ZvmClient]] = {}
_clients_lock = threading.Lock()
_sites: tuple[SitesFingerprint, list[Site]] | None = None
pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="rewind-lookup")


# A burst of look-ups at one site within one cache period (agents guarding at the start of a change window) is
# answered from one listing of all the site's VMs: after this many queries the next reads the whole list, kept
# exactly as long as a query's answer.
BURST_QUERIES = 3
_queries: dict[int, list[float]] = {}
_queries_lock = threading.Lock()


def query_note(site_pk: int) -> None:
    """Count one per-VM query sent to the site (for ``in_burst``)."""
    now = cache.clock()
    with _queries_lock:
        recent = [t for t in _queries.get(site_pk, ()) if t > now - ttl()]
        _queries[site_pk] = [*recent[-BURST_QUERIES:], now]


def in_burst(site_pk: int) -> bool:
    """True when the site was asked about ``BURST_QUERIES`` VMs within the cache time (never with the cache off)."""
    if ttl() <= 0:
        return False
    now = cache.clock()
    with _queries_lock:
        return sum(1 for t in _queries.get(site_pk, ()) if t > now - ttl()) >= BURST_QUERIES


def protection_cache_clear() -> None:
    """Forget cached look-ups, directories, sites and clients (tests, or after changing sites)."""
    global _sites
    cache.clear()
    answers.clear()
    with _queries_lock:
        _queries.clear()
    _sites = None
    with _clients_lock:
        _clients.clear()


def ttl() -> float:
    return float(settings.REWIND_LOOKUP_CACHE_S)


# Which site a ZVM is and which peers it has changes only when sites are paired or renamed,
# so that directory is kept at least this long even when look-ups themselves are not cached:
# otherwise every look-up pays two extra calls per site (localsite, peersites).
DIRECTORY_MIN_TTL_S = 60.0


def directory_ttl() -> float:
    return max(ttl(), DIRECTORY_MIN_TTL_S)


def answer_keep(key: tuple[str, SitesFingerprint], fresh_until: float, found: Protection) -> None:
    if len(answers) >= MAX_ENTRIES:
        answers.clear()
    answers[key] = (fresh_until, found)


def client_for(site: Site) -> ZvmClient:
    """The site's client (one token and pool per site), carrying the request id; kept per site while the row is
    unchanged. In cache-only mode a site without one raises ``Miss``."""
    key = (
        site.updated_at,
        site.base_url,
        site.username,
        site.client_id,
        site.password_encrypted,
        site.client_secret_encrypted,
        site.verify_tls,
        site.ca_bundle,
    )
    with _clients_lock:
        cached = _clients.get(site.pk)
    if cached is None or cached[0] != key:
        if cache_only.on:
            raise Miss
        cached = (key, site_client(site))
        with _clients_lock:
            _clients[site.pk] = cached
    return cached[1].with_request_id(current_request_id())


def enabled_sites() -> list[Site]:
    """Enabled sites, the rows reused while their fingerprint is unchanged; every call still reads the fingerprint,
    so a site added, changed, disabled or removed is seen at once."""
    global _sites
    fingerprint = sites_fingerprint()
    cached = _sites
    if cached is not None and cached[0] == fingerprint:
        return cached[1]
    sites = list(Site.objects.filter(enabled=True).order_by("name"))
    _sites = (fingerprint, sites)
    return sites


def sites_cached(fingerprint: SitesFingerprint) -> list[Site] | None:
    """The enabled sites as last read, if ``fingerprint`` is still theirs (no database access)."""
    cached = _sites
    return cached[1] if cached is not None and cached[0] == fingerprint else None
