"""The identity refresh: every enabled site's ZVM is asked who it is, every REWIND_SITE_REFRESH_INTERVAL_S.

It keeps what ``site_check`` learns current without anyone asking: a ZVM replaced or upgraded behind the same
address is noticed, and ``last_error`` says whether the site answered lately, which the choice of a recovery's
VPG goes by. One ``GET /v1/localsite`` per site, through its circuit, the sites at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.conf import settings
from django.utils import timezone

from rewind.audit import Actor
from rewind.lib.errors import ApplicationError
from rewind.sites.fanout import for_each_site
from rewind.sites.models import Site
from rewind.sites.selectors import site_enabled_list
from rewind.sites.services import site_client, site_record_clock, site_record_identity
from rewind.zvm import ZvmError


@dataclass
class RefreshReport:
    refreshed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # site name → why


def site_identity_refresh(*, site: Site) -> None:
    """Ask the site's ZVM who it is; record its identity and clock, or the error in ``last_error``. Raises the
    ``ZvmError``, or ``ApplicationError`` when the ZVM is one configured as another site (both recorded first).
    No transaction is held across the ZVM call. Safe to repeat."""
    client = site_client(site)
    try:
        local = client.local_site()
    except ZvmError as exc:
        Site.objects.filter(pk=site.pk).update(last_error=str(exc)[:2000], identity_checked_at=timezone.now())
        raise
    site_record_clock(site=site, measured=client.clock_offset())
    site_record_identity(site=site, local=local, actor=Actor.system())


def _refresh(site: Site) -> str:
    try:
        site_identity_refresh(site=site)
    except ApplicationError as exc:
        return exc.message
    return ""


def sites_identity_refresh() -> RefreshReport:
    """The beat's sweep over every enabled site. Safe to overlap: each write is the latest answer."""
    report = RefreshReport()
    outcomes = for_each_site(
        list(site_enabled_list()),
        _refresh,
        limit_s=settings.REWIND_SITE_REFRESH_INTERVAL_S,
        label="identity refresh",
    )
    for outcome in outcomes:
        problem = outcome.error or outcome.value
        if problem:
            report.failed[outcome.site.name] = problem
        else:
            report.refreshed.append(outcome.site.name)
    return report
