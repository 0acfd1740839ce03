"""Sites: the ZVMs this service is configured to talk to. Services here are the only code that creates or changes a
``Site``; ``site_client`` is the only way the rest of the product gets a ZVM client.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from rewind.audit import Actor, audit_record
from rewind.audit.actions import SiteAction
from rewind.lib.crypto import decrypt, encrypt
from rewind.lib.errors import ApplicationError
from rewind.lib.requestid import current_request_id
from rewind.sites.circuit import circuit_audit_catch_up, clear_local_circuit
from rewind.sites.fanout import SiteOutcome, for_each_site
from rewind.sites.models import MAX_REQUESTS_PER_S, Site
from rewind.sites.zvm_shared import shared_breaker
from rewind.zvm import CircuitState, LocalSite, ZvmClient, ZvmConnection, ZvmError
from rewind.zvm.client import shared_client
from rewind.zvm.clock import ClockOffset

logger = logging.getLogger(__name__)
# The stored offset is rewritten only when it moved this much or is this old: a guard
# measures it on every run, and a write per guard would be noise.
_CLOCK_MOVED_S = 0.5
_CLOCK_REFRESH = timedelta(minutes=5)

_EDITABLE = ("name", "base_url", "username", "client_id", "verify_tls", "ca_bundle", "enabled", "max_requests_per_s")


def site_base_url_clean(base_url: str) -> str:
    """``base_url`` as stored: trimmed, without a trailing ``/``. Raises ``ApplicationError`` (never quoting it)
    unless it is ``https://`` (or ``http://``) and a host, without a ``/v1`` end (the client adds it),
    credentials, a query or a fragment: it is shown, logged and audited as it is, and the client appends paths
    to it."""
    value = base_url.strip().rstrip("/")
    parts = urlsplit(value)
    if parts.scheme not in ("https", "http") or not parts.netloc:
        raise ApplicationError("give the ZVM's base URL, starting with https:// (or http://)")
    if "@" in parts.netloc:
        raise ApplicationError(
            "give the ZVM's base URL without a user name or password in it: they go in the username and password fields"
        )
    if parts.query or parts.fragment or value.endswith(("?", "#")):
        raise ApplicationError("give the ZVM's base URL without a query (?) or fragment (#)")
    if value.rsplit("/", 1)[-1].lower() == "v1":
        raise ApplicationError("give the ZVM's base URL without /v1")
    return value


def _validate(name: str, base_url: str, max_requests_per_s: float | None = None) -> None:
    if max_requests_per_s is not None and not 0 < max_requests_per_s <= MAX_REQUESTS_PER_S:
        raise ApplicationError(f"the request cap must be above 0 and at most {MAX_REQUESTS_PER_S:g} per second")
    if not name.strip():
        raise ApplicationError("a site needs a name")
    site_base_url_clean(base_url)


@transaction.atomic
def site_create(
    *,
    actor: Actor,
    name: str,
    base_url: str,
    username: str = "",
    password: str = "",
    client_id: str = "zerto-client",
    client_secret: str = "",
    verify_tls: bool = False,
    ca_bundle: str = "",
    enabled: bool = True,
    max_requests_per_s: float | None = None,
) -> Site:
    _validate(name, base_url, max_requests_per_s)
    if Site.objects.filter(name=name).exists():
        raise ApplicationError(f"a site named {name!r} already exists")
    site = Site(
        name=name.strip(),
        base_url=site_base_url_clean(base_url),
        username=username,
        password_encrypted=encrypt(password),
        client_id=client_id or "zerto-client",
        client_secret_encrypted=encrypt(client_secret),
        verify_tls=verify_tls,
        ca_bundle=ca_bundle.strip(),
        enabled=enabled,
        max_requests_per_s=max_requests_per_s,
    )
    site.save()
    _circuit_fresh(site)
    audit_record(actor=actor, action=SiteAction.CREATED, target=site, data={"after": site.audit_data()})
    return site


def _circuit_fresh(site: Site) -> None:
    """A new site starts with a closed circuit, and a disabled one is refused by every process at once: circuits
    are keyed by site id, and a Redis that outlived the database may hold an earlier site's."""
    key = str(site.pk)
    breaker = shared_breaker()
    breaker.forget(key)
    clear_local_circuit(key)
    if not site.enabled:
        breaker.set_disabled(key, True)


@transaction.atomic
def site_update(
    *, actor: Actor, site: Site, password: str | None = None, client_secret: str | None = None, **fields: object
) -> Site:
    """Change a site. ``password``/``client_secret`` of None keep the stored value."""
    before = site.audit_data()
    was_enabled = site.enabled
    for key, value in fields.items():
        if key not in _EDITABLE:
            raise ApplicationError(f"unknown site field {key!r}")
        setattr(site, key, value)
    _validate(site.name, site.base_url, site.max_requests_per_s)
    site.base_url = site_base_url_clean(site.base_url)
    changed_secrets = []
    if password is not None:
        site.password_encrypted = encrypt(password)
        changed_secrets.append("password")
    if client_secret is not None:
        site.client_secret_encrypted = encrypt(client_secret)
        changed_secrets.append("client_secret")
    site.save()
    if site.enabled != was_enabled:
        # Every process's next call to it is refused (or allowed) at once, not when its cache expires.
        shared_breaker().set_disabled(str(site.pk), not site.enabled)
    audit_record(
        actor=actor,
        action=SiteAction.CHANGED,
        target=site,
        # Not "secrets_changed": the masker would hide a key that says "secret".
        data={"before": before, "after": site.audit_data(), "rotated": changed_secrets},
    )
    return site


def _ca_bundle_path(site: Site) -> str | None:
    """requests pins a CA by file path; keep one file per distinct bundle under VAR_DIR."""
    if not site.ca_bundle:
        return None
    digest = hashlib.sha256(site.ca_bundle.encode()).hexdigest()[:16]
    folder = settings.VAR_DIR / "ca"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{digest}.pem"
    if not path.exists():
        path.write_text(site.ca_bundle + "\n", encoding="utf-8")
    return str(path)


def site_request_cap(site: Site) -> float:
    """The most requests per second to the site's ZVM from all our processes: its own, else the default."""
    return site.max_requests_per_s or float(settings.ZVM_MAX_REQUESTS_PER_S)


def site_connection(site: Site) -> ZvmConnection:
    return ZvmConnection(
        site_name=site.name,
        base_url=site.base_url,
        username=site.username,
        password=decrypt(site.password_encrypted),
        client_id=site.client_id or "zerto-client",
        client_secret=decrypt(site.client_secret_encrypted) or None,
        verify_tls=site.verify_tls,
        ca_bundle=_ca_bundle_path(site),
        connect_timeout=settings.ZVM_CONNECT_TIMEOUT_S,
        read_timeout=settings.ZVM_READ_TIMEOUT_S,
        max_requests_per_s=site_request_cap(site),
        circuit_key=str(site.pk) if site.pk else "",
    )


def site_client(site: Site, *, request_id: str | None = None) -> ZvmClient:
    """The ZVM client for ``site``, carrying the current request id. Its clients share the HTTP pool within a
    process, and the token and request cap with every process, so a call does not log in again and all of them
    together stay under the cap."""
    return shared_client(site_connection(site), request_id=request_id or current_request_id())


@dataclass(frozen=True)
class SiteCheck:
    site: Site
    ok: bool
    local: LocalSite | None
    vpg_count: int | None
    error: str
    asked: bool = True  # False: not asked, the site being marked unavailable (``error`` says since when)


def site_check(*, site: Site, actor: Actor = Actor.system(), force: bool = False) -> SiteCheck:
    """Log in, read ``/v1/localsite`` and count VPGs; record the identity or the error. No transaction is held
    across the ZVM calls.

    While the site's circuit is open it is not asked before its next trial (the check fails at once, recording
    nothing) unless this check is the trial; ``force`` asks anyway, bounded by the client's timeouts, so a
    person who fixed the ZVM need not wait for the probe. An answer closes the circuit.
    """
    if not force and (refused := _not_asked_now(site)):
        return SiteCheck(site, False, None, None, refused, asked=False)
    try:
        client = site_client(site).ungated()  # past the circuit: refused above, or this is its trial
        local = client.local_site()
        vpg_count = len(client.list_vpgs())
    except ZvmError as exc:
        Site.objects.filter(pk=site.pk).update(last_error=str(exc)[:2000], identity_checked_at=timezone.now())
        site.refresh_from_db()
        return SiteCheck(site, False, None, None, str(exc))
    site_record_clock(site=site, measured=client.clock_offset(), force=True)
    try:
        site_record_identity(site=site, local=local, actor=actor)
    except ApplicationError as exc:
        return SiteCheck(site, False, local, vpg_count, exc.message)
    return SiteCheck(site, True, local, vpg_count, "")


# A check makes up to three calls (a login, /v1/localsite, /v1/vpgs), each bounded by the timeouts.
_CHECK_CALLS = 3


def site_check_limit_s() -> float:
    """How long a check of several sites waits for the slowest before reporting it as not answering."""
    return _CHECK_CALLS * (settings.ZVM_CONNECT_TIMEOUT_S + settings.ZVM_READ_TIMEOUT_S) + 5


def sites_check(
    *,
    sites: Sequence[Site],
    actor: Actor = Actor.system(),
    force: bool = False,
    on_done: Callable[[SiteOutcome[SiteCheck]], None] | None = None,
) -> list[SiteOutcome[SiteCheck]]:
    """``site_check`` of every site at once, each in a thread of its own: ``on_done`` gets each outcome as it
    comes, and a site still being asked after ``site_check_limit_s`` is reported as such."""
    return for_each_site(
        sites,
        lambda site: site_check(site=site, actor=actor, force=force),
        limit_s=site_check_limit_s(),
        label="check",
        on_done=on_done,
    )


def _not_asked_now(site: Site) -> str:
    """Why a check must not ask the site now, or "" when it may (closed, or the trial is due and ours)."""
    breaker, key = shared_breaker(), str(site.pk)
    state = breaker.state(key)
    if not state.is_open or breaker.admit(key) is None:
        return ""
    since = datetime.fromtimestamp(state.opened_at, UTC)
    return (
        f"unavailable since {since:%Y-%m-%d %H:%M:%S} UTC: {state.reason} (not asked again before its next "
        "trial; a forced check asks now)"
    )


@transaction.atomic
def site_record_identity(*, site: Site, local: LocalSite, actor: Actor) -> Site:
    clash = Site.objects.filter(identifier=local.identifier).exclude(pk=site.pk).first()
    if clash is not None:
        message = f"{site.name} is the same ZVM as site {clash.name} (identifier {local.identifier})"
        Site.objects.filter(pk=site.pk).update(last_error=message, identity_checked_at=timezone.now())
        site.refresh_from_db()
        raise ApplicationError(message)
    changed = (site.identifier, site.site_type, site.version) != (local.identifier, local.type, local.version)
    Site.objects.filter(pk=site.pk).update(
        identifier=local.identifier,
        site_type=local.type or "",
        version=local.version or "",
        identity_checked_at=timezone.now(),
        last_error="",
    )
    site.refresh_from_db()
    if changed:
        audit_record(
            actor=actor,
            action=SiteAction.IDENTITY_LEARNED,
            target=site,
            data={"identifier": local.identifier, "type": local.type, "version": local.version, "zvm_name": local.name},
        )
    return site


def site_clock_offset_s(site: Site | None) -> float:
    """The site's ZVM clock minus ours: from its answers to this process in the last minutes, else as last stored;
    0 when never measured."""
    if site is None:
        return 0.0
    measured = site_client(site).clock_offset()
    if measured is not None:
        return measured.offset_s
    return site.clock_offset_s if site.clock_offset_s is not None else 0.0


def clock_skew_warning(offset_s: float | None) -> str:
    """A warning for an offset past ``REWIND_CLOCK_SKEW_WARN_S``, or ""."""
    limit = settings.REWIND_CLOCK_SKEW_WARN_S
    if offset_s is None or abs(offset_s) <= limit:
        return ""
    side = "ahead of" if offset_s > 0 else "behind"
    return f"the ZVM's clock is {abs(offset_s):.1f} s {side} ours (more than {limit:g} s; check its NTP)"


def site_record_clock(*, site: Site, measured: ClockOffset | None, force: bool = False) -> bool:
    """Store the offset measured from the site's ZVM answers; True when written. Skipped when nothing was measured
    or (unless ``force``) the stored value is fresh and within ``_CLOCK_MOVED_S``. Not audited: a measurement,
    not a change anyone made."""
    if measured is None:
        return False
    now = timezone.now()
    offset = round(measured.offset_s, 3)
    fresh = site.clock_checked_at is not None and now - site.clock_checked_at < _CLOCK_REFRESH
    if not force and fresh and site.clock_offset_s is not None and abs(site.clock_offset_s - offset) < _CLOCK_MOVED_S:
        return False
    Site.objects.filter(pk=site.pk).update(clock_offset_s=offset, clock_checked_at=now)
    moved = site.clock_offset_s is None or abs(site.clock_offset_s - offset) >= _CLOCK_MOVED_S
    site.clock_offset_s, site.clock_checked_at = offset, now
    warning = clock_skew_warning(offset)
    if warning and moved:
        logger.warning("site %s: %s", site.name, warning)
    return True


# --- availability (the circuit breaker) -------------------------------------------------------
def site_circuit(site: Site) -> CircuitState:
    return shared_breaker().state(str(site.pk))


def site_availability(site: Site) -> dict[str, object]:
    """``{available, since, reason, failures}`` for the admin, the REST API and ``zvm_check``."""
    state = site_circuit(site)
    since = datetime.fromtimestamp(state.opened_at, UTC) if state.is_open else None
    return {
        "available": not state.is_open and site.enabled,
        "since": since,
        "reason": state.reason if state.is_open else "",
        "failures": state.failures,
    }


def site_availability_text(site: Site) -> str:
    info = site_availability(site)
    if not site.enabled:
        return "disabled"
    if info["since"] is None:
        return "available"
    since = info["since"]
    assert isinstance(since, datetime)
    return f"unavailable since {since:%Y-%m-%d %H:%M:%S} UTC: {info['reason']}"


@dataclass
class ProbeReport:
    probed: dict[str, str]  # site name → "available", or why not
    skipped: list[str]  # open circuits whose next trial is not due, or whose trial another process holds
    audited: list[str]


def _probe_one(site: Site) -> None:
    site_client(site).ungated().local_site()


def sites_probe() -> ProbeReport:
    """The beat's probe: one trial call (``GET /v1/localsite``) to each site whose circuit is open and whose trial
    is due, the sites at once. Safe to overlap: each trial is claimed once across processes."""
    report = ProbeReport({}, [], [])
    breaker = shared_breaker()
    due: list[Site] = []
    for site in Site.objects.filter(enabled=True).order_by("name"):
        state = breaker.state(str(site.pk))
        if state.is_open:
            if time.time() < state.next_trial_at or breaker.admit(str(site.pk)) is not None:
                report.skipped.append(site.name)
            else:
                due.append(site)
        if circuit_audit_catch_up(breaker, site):
            report.audited.append(site.name)
    limit = settings.ZVM_CONNECT_TIMEOUT_S + settings.ZVM_READ_TIMEOUT_S + 5
    for outcome in for_each_site(due, _probe_one, limit_s=limit, label="probe"):
        report.probed[outcome.site.name] = "available" if outcome.ok else outcome.error
    return report


def site_register(
    *, actor: Actor, name: str, base_url: str, username: str, password: str, ca_bundle: str | None = None
) -> SiteCheck:
    """The site ``name`` created at ``base_url``, or the existing one moved there; then checked, the outcome
    returned, never raised. For set-ups that name their sites themselves (``demo_setup``, the benchmarks, the
    tests): safe to run again; an existing site keeps its credentials. ``ca_bundle`` (PEM) pins the ZVM's
    certificate, replacing one that differs; None keeps what is pinned."""
    site = Site.objects.filter(name=name).first()
    if site is None:
        site = site_create(
            actor=actor, name=name, base_url=base_url, username=username, password=password, ca_bundle=ca_bundle or ""
        )
    else:
        changes: dict[str, str] = {}
        if site.base_url != site_base_url_clean(base_url):
            changes["base_url"] = base_url
        if ca_bundle is not None and site.ca_bundle != ca_bundle.strip():
            changes["ca_bundle"] = ca_bundle.strip()
        if changes:
            site = site_update(actor=actor, site=site, **changes)
    # Forced: a set-up has just started its ZVM, and a circuit a last run left open must not hide it.
    return site_check(site=site, actor=actor, force=True)
