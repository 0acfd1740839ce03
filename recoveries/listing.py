"""Recording what a site's ZVM listed: its live FLR sessions, ours and others' (``FlrSiteListing``).

Other operators' sessions are never recorded one by one (this service never touches them);
only their count is kept, for ``/metrics``, since a foreign mount blocks the VPG's next
clone, failover test, live failover or Extended Journal Copy.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db import IntegrityError, transaction
from django.utils import timezone

from recoveries.models import FlrSession, FlrSiteListing
from rewind.sites.models import Site
from rewind.zvm import FlrSession as ZvmFlrSession


def flr_listing_record(*, site: Site, sessions: Iterable[ZvmFlrSession]) -> FlrSiteListing:
    """Record a full listing of ``site``'s sessions; the latest call wins (harmless to repeat)."""
    live = [s.identifier for s in sessions if s.identifier and not s.is_terminal]
    recorded = {
        sid.lower()
        for sid in FlrSession.objects.filter(site=site, session_id__in=live).values_list("session_id", flat=True)
    }
    ours = sum(1 for sid in live if sid.lower() in recorded)
    values = {"listed_at": timezone.now(), "live_ours": ours, "live_foreign": len(live) - ours}
    if not FlrSiteListing.objects.filter(site=site).update(**values):
        try:
            with transaction.atomic():  # a savepoint: another sweep may create it first
                return FlrSiteListing.objects.create(site=site, **values)
        except IntegrityError:
            FlrSiteListing.objects.filter(site=site).update(**values)
    return FlrSiteListing.objects.get(site=site)
