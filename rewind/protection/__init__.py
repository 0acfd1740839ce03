"""Protection: which VM a name means, and which VPGs protect it (read-only; asks every enabled site's ZVM).

- ``lookup``: the matching rules and ``find_protection`` / ``find_protection_cached``;
- ``results``: what a look-up answers (``Protection``, ``VpgProtection``, ``SiteRef``) and its errors;
- ``eligibility``: whether a tagged checkpoint can be inserted on a VPG, and why not;
- ``cache``: the TTL cache (with an injectable clock) and its cache-only mode;
- ``fingerprint``: the enabled sites' fingerprint (one raw query);
- ``state``: the per-process caches, sites, clients (from ``rewind.sites.site_client``) and thread pool.
"""

from rewind.protection.fingerprint import SitesFingerprint, sites_fingerprint
from rewind.protection.lookup import Resolver, dns_resolver, find_protection, find_protection_cached
from rewind.protection.results import (
    Candidate,
    Protection,
    SiteRef,
    SitesUnavailableError,
    VmAmbiguousError,
    VmNotFoundError,
    VpgProtection,
)
from rewind.protection.state import protection_cache_clear

__all__ = [
    "Candidate",
    "Protection",
    "Resolver",
    "SiteRef",
    "SitesFingerprint",
    "SitesUnavailableError",
    "VmAmbiguousError",
    "VmNotFoundError",
    "VpgProtection",
    "dns_resolver",
    "find_protection",
    "find_protection_cached",
    "protection_cache_clear",
    "sites_fingerprint",
]
