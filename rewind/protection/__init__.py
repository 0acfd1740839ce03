"""Protection: which VM a name means, and which VPGs protect it (read-only; asks every enabled site's ZVM).

``lookup`` holds the matching rules, ``results`` the answers and errors, ``eligibility`` whether a VPG can take
a tagged checkpoint, and ``cache``, ``fingerprint`` and ``state`` the per-process caches.
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
