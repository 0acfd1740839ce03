"""Recording what a site's ZVM listed: its live FLR sessions, ours and others' (``FlrSiteListing``).

Others' sessions are kept as listed, since a foreign mount blocks the VPG's next clone, failover test or
Extended Journal Copy and only a person may end it. Not audited: a record of what was seen, not a change.
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
    live_sessions = [s for s in sessions if s.identifier and not s.is_terminal]
    live = [str(s.identifier) for s in live_sessions]
    recorded = {
        sid.lower()
        for sid in FlrSession.objects.filter(site=site, session_id__in=live).values_list("session_id", flat=True)
    }
    foreign = [_described(s) for s in live_sessions if str(s.identifier).lower() not in recorded]
    values = {
        "listed_at": timezone.now(),
        "live_ours": len(live) - len(foreign),
        "live_foreign": len(foreign),
        "foreign": foreign,
    }
    if not FlrSiteListing.objects.filter(site=site).update(**values):
        try:
            with transaction.atomic():  # a savepoint: another sweep may create it first
                return FlrSiteListing.objects.create(site=site, **values)
        except IntegrityError:
            FlrSiteListing.objects.filter(site=site).update(**values)
    return FlrSiteListing.objects.get(site=site)


def _described(session: ZvmFlrSession) -> dict[str, str | None]:
    return {
        "session_id": session.identifier,
        "status": session.status,
        "vm_identifier": session.vm_identifier,
        "vpg_identifier": session.vpg_identifier,
        "checkpoint_identifier": session.checkpoint_identifier,
        "mount_time": session.mount_time.isoformat() if session.mount_time else None,
    }
