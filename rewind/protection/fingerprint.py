"""The enabled sites' fingerprint: one small raw query that changes when a site does, so a cached look-up can tell
its sites are still the ones it was built from without loading the rows (measured: see the benchmarks page).
"""

from __future__ import annotations

from typing import Any

from django.db import connection

from rewind.sites.models import Site

SitesFingerprint = tuple[tuple[Any, ...], ...]


def sites_fingerprint() -> SitesFingerprint:
    """(id, updated_at, identifier) of every enabled site: changes when a site is added, changed, disabled or
    removed. Database access: call it off the event loop."""
    table = connection.ops.quote_name(Site._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT id, updated_at, identifier FROM {table} WHERE enabled = %s ORDER BY id", [True])
        return tuple(map(tuple, cursor.fetchall()))
