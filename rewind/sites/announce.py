"""What sites tell the notification channels: a site has been unreachable for too long.

Sites flap for seconds all the time, so people hear of one only once its circuit has been open for
REWIND_NOTIFY_SITE_DOWN_MIN, and once per outage: the event's key carries the time the circuit opened.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

from django.conf import settings
from django.urls import reverse

from rewind.notifications.models import NotificationKind
from rewind.notifications.services import notification_send, notifying
from rewind.sites.models import Site
from rewind.sites.zvm_shared import shared_breaker
from rewind.zvm import CircuitState


def sites_announce_down(*, now: float | None = None) -> list[str]:
    """The beat's sweep: announce each enabled site unreachable for the threshold; returns their
    names (those announced before included). Reads the circuits only; safe to overlap."""
    now = time.time() if now is None else now
    threshold_s = settings.REWIND_NOTIFY_SITE_DOWN_MIN * 60
    breaker = shared_breaker()
    down = []
    for site in Site.objects.filter(enabled=True).order_by("name"):
        state = breaker.state(str(site.pk))
        if not state.is_open or now - state.opened_at < threshold_s:
            continue
        down.append(site.name)
        with notifying(f"site {site.name} is down"):
            _announce(site, state, now)
    return down


def _announce(site: Site, state: CircuitState, now: float) -> None:
    since = datetime.fromtimestamp(state.opened_at, UTC)
    minutes = int((now - state.opened_at) // 60)
    body = "\n".join(
        [
            f"Site {site.name} ({site.base_url}) has not answered since {since:%Y-%m-%d %H:%M:%S} UTC "
            f"({minutes} min, {state.failures} failed call(s)).",
            f"Last: {state.reason}",
            "Guards and recoveries that need its ZVM fail at once until it answers; a probe asks it",
            f"every {settings.ZVM_CIRCUIT_PROBE_S:g} s or more.",
            "",
            f"Site: {settings.REWIND_PUBLIC_URL}{reverse('admin:rewind_site_change', args=[site.pk])}",
        ]
    )
    notification_send(
        kind=NotificationKind.SITE_DOWN,
        dedupe_key=f"site:{site.pk}:down:{int(state.opened_at)}",
        title=f"[zerto-rewind] Site {site.name} unreachable for {minutes} min",
        body=body,
        sites=[site.name],
        target=site,
    )
