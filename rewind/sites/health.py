"""Each site's health as every process sees it, for people: its circuit, its token, when it last
answered. Reads the database and the shared stores (Redis when configured); never asks a ZVM."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from rewind.sites.models import Site
from rewind.sites.services import clock_skew_warning, site_circuit, site_connection
from rewind.sites.zvm_shared import shared_stores


@dataclass(frozen=True)
class TokenState:
    """The Keycloak token every process shares for the site: never the token itself."""

    state: str  # "valid", "expired" (the next call logs in) or "none" (no login kept)
    expires_at: datetime | None = None
    obtained_at: datetime | None = None


@dataclass(frozen=True)
class SiteHealth:
    site: Site
    status: str  # "available", "unavailable" (its circuit is open) or "disabled"
    unavailable_since: datetime | None
    reason: str  # why its circuit opened
    failures: int  # consecutive failed calls counted so far
    last_contact: datetime | None  # the latest time we know the ZVM answered
    last_error: str  # what the last connection test said, if it failed
    token: TokenState
    clock_warning: str


def _when(seconds: float) -> datetime | None:
    return datetime.fromtimestamp(seconds, UTC) if seconds > 0 else None


def site_token_state(site: Site, now: datetime) -> TokenState:
    stored = shared_stores().tokens.get(site_connection(site).login_key)
    if stored is None or not stored.token:
        return TokenState("none")
    expires_at = _when(stored.expires_at)
    obtained_at = _when(stored.expires_at - stored.lifetime) if stored.lifetime > 0 else None
    state = "valid" if expires_at is not None and expires_at > now else "expired"
    return TokenState(state, expires_at, obtained_at)


def _last_contact(site: Site, token: TokenState) -> datetime | None:
    # Answers leave traces in three places: a connection test that succeeded, the clock offset
    # measured from the Date of an answer (rewritten at most every few minutes), and a login.
    seen = [site.clock_checked_at, token.obtained_at]
    if not site.last_error:
        seen.append(site.identity_checked_at)
    return max((t for t in seen if t is not None), default=None)


def site_health(site: Site, now: datetime) -> SiteHealth:
    circuit = site_circuit(site)
    token = site_token_state(site, now)
    if not site.enabled:
        status = "disabled"
    else:
        status = "unavailable" if circuit.is_open else "available"
    return SiteHealth(
        site=site,
        status=status,
        unavailable_since=_when(circuit.opened_at) if circuit.is_open else None,
        reason=circuit.reason if circuit.is_open else "",
        failures=circuit.failures,
        last_contact=_last_contact(site, token),
        last_error=site.last_error,
        token=token,
        clock_warning=clock_skew_warning(site.clock_offset_s),
    )


def sites_health(now: datetime) -> list[SiteHealth]:
    """Every configured site, by name, enabled or not."""
    return [site_health(site, now) for site in Site.objects.order_by("name")]
