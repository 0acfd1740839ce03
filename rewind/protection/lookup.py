"""Protection lookup: a VM name, FQDN, short hostname or vmIdentifier to one VM and its VPGs (docs/mcp.md, "Looking
a VM up").

Every enabled site's ZVM is asked at once, and rows are deduplicated on (VM, VPG): a VM replicated A to B is
listed by both. The first stage with a hit wins: the vmIdentifier, the exact name, an FQDN's short name (each
one filtered call per site, so the cost does not grow with the inventory), then DNS matched against the VMs'
addresses from a per-site index read at most once per cache period.

The ZVM of a VM's protected site lists every VPG protecting it, so a look-up is complete when that site
answered, refused naming it when it could not be asked, and names the sites it could not ask rather than say
"not found" (``_complete_or_refuse``; docs/operations.md, "Look-ups and guards"). ``find_protection_cached``
answers from the per-process caches alone, so an async caller can skip the thread hand-off.
"""

from __future__ import annotations

import ipaddress
import logging
import re
import socket
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import TypeVar

from rewind.lib.concurrency import run_each
from rewind.lib.errors import ApplicationError
from rewind.protection import state
from rewind.protection.cache import Miss, cache_only
from rewind.protection.eligibility import insert_refusal
from rewind.protection.fingerprint import SitesFingerprint
from rewind.protection.query import check_vm_query
from rewind.protection.results import (
    Candidate,
    Protection,
    SiteRef,
    SitesUnavailableError,
    VmAmbiguousError,
    VmNotFoundError,
    VpgProtection,
)
from rewind.sites.models import Site
from rewind.zvm import LocalSite, PeerSite, VmList, VmRow, ZvmClient, ZvmError

logger = logging.getLogger(__name__)
T = TypeVar("T")

Resolver = Callable[[str], Iterable[str]]
"""Host name → IP addresses (empty when it does not resolve)."""

DNS_TIMEOUT_S = 2.0
_VM_IDENTIFIER = re.compile(r"^[A-Za-z0-9-]+\.vm-\d+$")
_HOSTNAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,62})(?:\.[A-Za-z0-9-]{1,63})*\.?$")


# --- per-site work -----------------------------------------------------------------------
@dataclass(frozen=True)
class _Handle:
    site: Site
    client: ZvmClient


@dataclass(frozen=True)
class _Directory:
    local: LocalSite
    peers: tuple[PeerSite, ...]


def _directory(h: _Handle) -> _Directory:
    def load() -> _Directory:
        return _Directory(h.client.local_site(), tuple(h.client.peer_sites()))

    # Keyed by the address too: a site row pointed at another ZVM is another directory.
    return state.cache.get(("dir", h.site.pk, h.site.base_url), state.directory_ttl(), load)


def _inventory(h: _Handle) -> VmList:
    """Every VM row the site lists (one unfiltered ``GET /v1/vms``), kept for the cache time."""
    return state.cache.get(("all", h.site.pk), state.ttl(), h.client.vm_list)


def _from_inventory(h: _Handle) -> bool:
    """Whether to answer from the site's whole VM list: it is at hand, or a burst of look-ups makes it the cheaper way."""
    return state.cache.fresh(("all", h.site.pk)) or state.in_burst(h.site.pk)


def _queried(h: _Handle, query: Callable[[], list[VmRow]]) -> Callable[[], list[VmRow]]:
    def load() -> list[VmRow]:
        state.query_note(h.site.pk)
        return query()

    return load


def _found(h: _Handle, keys: Callable[[VmList, int], Iterable[str]], wanted: Iterable[str]) -> list[VmRow]:
    """The rows of the site's whole VM list whose ``keys`` include one of ``wanted``, through an index the list
    builds once and keeps (``VmList.index``): a look-up under load answers from the list many times a second."""
    rows = _inventory(h)
    index = rows.index(keys)
    return [rows[i] for key in wanted for i in index.get(key, ())]


def _by_name(rows: VmList, i: int) -> Iterable[str]:
    name = rows.name_at(i)
    return (name.casefold(),) if name else ()


def _by_identifier(rows: VmList, i: int) -> Iterable[str]:
    identifier = rows.identifier_at(i)
    return (identifier.casefold(),) if identifier else ()


def _by_ip(rows: VmList, i: int) -> Iterable[str]:
    return {_normal_ip(ip) for ip in rows.ip_addresses_at(i)}


def _rows_by_name(h: _Handle, name: str) -> list[VmRow]:
    wanted = name.casefold()
    if _from_inventory(h):
        return _found(h, _by_name, (wanted,))
    load = _queried(h, lambda: h.client.list_vms(vm_name=name))
    rows = state.cache.get(("name", h.site.pk, wanted), state.ttl(), load)
    return [r for r in rows if (r.vm_name or "").casefold() == wanted]


def _rows_by_identifier(h: _Handle, identifier: str) -> list[VmRow]:
    wanted = identifier.casefold()
    if _from_inventory(h):
        return _found(h, _by_identifier, (wanted,))
    load = _queried(h, lambda: h.client.list_vms(vm_identifier=identifier))
    rows = state.cache.get(("id", h.site.pk, wanted), state.ttl(), load)
    return [r for r in rows if (r.vm_identifier or "").casefold() == wanted]


def _rows_by_ips(h: _Handle, ips: frozenset[str]) -> list[VmRow]:
    return _found(h, _by_ip, ips)


Failed = dict[int, tuple["_Handle", ZvmError]]
"""Sites that could not be asked during one look-up: site id → (handle, why)."""


def _down_key(h: _Handle) -> tuple[str, int]:
    return ("down", h.site.pk)


def _asked(work: Callable[[_Handle], T]) -> Callable[[_Handle], T]:
    """``work``, except that in cache-only mode a site remembered as down fails instead of missing."""

    def run(h: _Handle) -> T:
        try:
            return work(h)
        except Miss:
            if not cache_only.on:
                raise
            down: ZvmError = state.cache.get(_down_key(h), state.ttl(), _no_load)  # Miss when not down
            raise down from None

    return run


def _no_load() -> ZvmError:
    raise Miss


def _from_cache(
    handles: Sequence[_Handle], work: Callable[[_Handle], T], failed: Failed
) -> list[tuple[_Handle, T]] | None:
    """``work`` for every site if it needs no ZVM call (all cached, or known down), else None; inside
    ``find_protection_cached`` (cache-only already on) a miss propagates instead."""

    def all_of() -> list[tuple[_Handle, T]]:
        results = []
        for h in handles:
            if h.site.pk in failed:
                continue
            try:
                results.append((h, _asked(work)(h)))
            except ZvmError as exc:
                failed[h.site.pk] = (h, exc)
        return results

    if cache_only.on:
        return all_of()
    cache_only.on = True
    before = dict(failed)
    try:
        return all_of()
    except Miss:
        failed.clear()
        failed.update(before)
        return None
    finally:
        cache_only.on = False


def _fan_out(handles: Sequence[_Handle], work: Callable[[_Handle], T], failed: Failed) -> list[tuple[_Handle, T]]:
    """Run ``work`` on every site not yet in ``failed`` at once, adding the sites that fail. Never raises a ZVM
    error: what a missing site means is ``_complete_or_refuse``'s rule."""
    cached = _from_cache(handles, work, failed)
    if cached is not None:
        return cached  # the common case under load: no thread hand-off at all
    todo = [h for h in handles if h.site.pk not in failed]
    # No time limit: each site's call is bounded by its client's timeouts and circuit, and a
    # look-up must know what every site said. The ORM is not used there, so no transaction matters.
    outcomes = run_each(todo, work, inline=len(todo) == 1, name="lookup")
    results: list[tuple[_Handle, T]] = []
    for outcome in outcomes:
        h = outcome.item
        try:
            results.append((h, outcome.result()))  # any other exception is a bug: raised
        except ZvmError as exc:
            failed[h.site.pk] = (h, exc)
            state.cache.put(_down_key(h), state.ttl(), exc)
        else:
            state.cache.forget(_down_key(h))
    return results


# --- DNS ---------------------------------------------------------------------------------
def _normal_ip(value: str) -> str:
    try:
        return str(ipaddress.ip_address(value.split("%", 1)[0]))
    except ValueError:
        return value


def _is_ip(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def dns_resolver(host: str) -> list[str]:
    """The default resolver: ``getaddrinfo`` with a DNS_TIMEOUT_S bound (it has no timeout of its own)."""
    future = state.pool.submit(socket.getaddrinfo, host, None, 0, socket.SOCK_STREAM)
    try:
        infos = future.result(timeout=DNS_TIMEOUT_S)
    except (OSError, UnicodeError, FutureTimeout):
        return []
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def _resolve(query: str, resolver: Resolver) -> frozenset[str]:
    if _is_ip(query):
        return frozenset({_normal_ip(query)})
    if not _HOSTNAME.match(query):
        return frozenset()
    try:
        return frozenset(_normal_ip(ip) for ip in resolver(query.rstrip(".")))
    except OSError:
        return frozenset()


# --- the lookup --------------------------------------------------------------------------
def _matching_rows(
    query: str, handles: Sequence[_Handle], resolver: Resolver, failed: Failed
) -> list[tuple[_Handle, VmRow]]:
    def collect(work: Callable[[_Handle], list[VmRow]]) -> list[tuple[_Handle, VmRow]]:
        return [(h, row) for h, rows in _fan_out(handles, work, failed) for row in rows if row.vm_identifier]

    if _VM_IDENTIFIER.match(query):
        found = collect(lambda h: _rows_by_identifier(h, query))
        if found:
            return found
    found = collect(lambda h: _rows_by_name(h, query))
    if found:
        return found
    short = query.split(".", 1)[0]
    if "." in query and short and not _is_ip(query) and not _VM_IDENTIFIER.match(query):
        found = collect(lambda h: _rows_by_name(h, short))
        if found:
            return found
    if cache_only.on and not _is_ip(query):
        raise Miss  # DNS is I/O
    ips = _resolve(query, resolver)
    if ips:
        return collect(lambda h: _rows_by_ips(h, ips))
    return []


def _candidates(rows: Sequence[tuple[_Handle, VmRow]]) -> list[Candidate]:
    seen: dict[str, tuple[str | None, dict[str, None]]] = {}
    for h, row in rows:
        assert row.vm_identifier is not None
        _name, sites = seen.setdefault(row.vm_identifier, (row.vm_name, {}))
        sites.setdefault(h.site.name, None)
    return [Candidate(name, ident, tuple(sites)) for ident, (name, sites) in sorted(seen.items())]


@dataclass(frozen=True)
class _SiteInfo:
    name: str | None
    type: str | None


class _Sites:
    """What the configured sites say about every site they know: names, types, configured here."""

    def __init__(self, handles: Sequence[_Handle], directories: Sequence[tuple[_Handle, _Directory]]) -> None:
        self.info: dict[str, _SiteInfo] = {}
        self.configured: dict[str, Site] = {}
        for h in handles:
            if h.site.identifier:
                self.configured[h.site.identifier] = h.site
        for _h, d in directories:
            for peer in d.peers:
                if peer.identifier:
                    self.info.setdefault(peer.identifier, _SiteInfo(peer.name, peer.type))
        for h, d in directories:  # a site's own word about itself wins
            if d.local.identifier:
                self.info[d.local.identifier] = _SiteInfo(d.local.name, d.local.type)
                self.configured.setdefault(d.local.identifier, h.site)

    def ref(self, identifier: str | None, reported_name: str | None) -> SiteRef:
        info = self.info.get(identifier or "", _SiteInfo(None, None))
        site = self.configured.get(identifier or "")
        return SiteRef(
            identifier=identifier,
            name=info.name or reported_name or (site.name if site else None),
            type=info.type or (site.site_type if site and site.site_type else None),
            configured=site is not None,
            site_pk=site.pk if site else None,
        )


def _status_names(h: _Handle, status: int | None, sub_status: int | None) -> tuple[str | None, str | None]:
    def load() -> tuple[list[str], list[str]]:
        # The client keeps the lists too; this copy only tells a cache-only lookup they are here.
        return h.client.vpg_status_names(), h.client.vpg_substatus_names()

    try:
        statuses, sub_statuses = state.cache.get(("names", h.site.pk), state.ttl(), load)
    except ZvmError as exc:
        logger.warning("could not read VPG status names from %s: %s", h.site.name, exc)
        return None, None
    return _name_at(statuses, status), _name_at(sub_statuses, sub_status)


def _name_at(names: Sequence[str], code: int | None) -> str | None:
    return names[code] if code is not None and 0 <= code < len(names) else None


def _vpg_protection(h: _Handle, row: VmRow, sites: _Sites) -> VpgProtection:
    protected = sites.ref(row.protected_site.identifier, row.protected_site_name)
    recovery = sites.ref(row.recovery_site.identifier, row.recovery_site_name)
    status_name, sub_status_name = _status_names(h, row.status, row.sub_status)
    reason = insert_refusal(row.vpg_name, protected, status_name, row.status, row.sub_status, sub_status_name)
    assert row.vpg_identifier is not None
    return VpgProtection(
        identifier=row.vpg_identifier,
        name=row.vpg_name,
        protected_site=protected,
        recovery_site=recovery,
        status=row.status,
        status_name=status_name,
        sub_status=row.sub_status,
        sub_status_name=sub_status_name,
        is_flr_enabled=bool(row.is_flr_enabled),
        can_insert_checkpoint=reason is None,
        cannot_insert_reason=reason,
    )


def _one_row_per_vpg(rows: Sequence[tuple[_Handle, VmRow]]) -> list[tuple[_Handle, VmRow]]:
    """Dedupe on VpgIdentifier, preferring the row of the protected site's own ZVM (it is authoritative)."""
    best: dict[str, tuple[_Handle, VmRow]] = {}
    for h, row in rows:
        if not row.vpg_identifier:
            continue
        current = best.get(row.vpg_identifier)
        if current is None or (row.protected_site.is_local and not current[1].protected_site.is_local):
            best[row.vpg_identifier] = (h, row)
    return sorted(best.values(), key=lambda hr: ((hr[1].vpg_name or "").casefold(), hr[1].vpg_identifier or ""))


def find_protection(vm: str, *, resolver: Resolver | None = None) -> Protection:
    """The one VM ``vm`` names and every VPG protecting it, across all enabled sites. Read-only; safe to repeat.

    Raises ``VmNotFoundError``, ``VmAmbiguousError`` (listing name, identifier and sites of each match),
    ``SitesUnavailableError`` (the VM's own site, or every site that might know it, could not be asked),
    ``VmQueryError`` (a query that can name no VM), ``ApplicationError`` (no site configured).
    """
    return _lookup(vm, state.enabled_sites(), resolver or dns_resolver)


def find_protection_cached(vm: str, fingerprint: SitesFingerprint) -> Protection | None:
    """``find_protection(vm)`` when the per-process caches hold all it needs, else None; raises what
    ``find_protection`` raises. ``fingerprint`` must be read after the caller's call began, so a site change
    committed before it is seen. Never touches the database, a ZVM or DNS: safe on an event loop."""
    sites = state.sites_cached(fingerprint)
    if sites is None:
        return None
    key = (vm, fingerprint)
    answer = state.answers.get(key)
    if answer is not None and answer[0] > state.cache.clock():
        return answer[1]
    cache_only.on, cache_only.fresh_until, cache_only.refresh_at = True, float("inf"), float("inf")
    try:
        found = _lookup(vm, sites, dns_resolver)
    except Miss:
        return None
    finally:
        cache_only.on = False
    # The answer is as fresh as the oldest cached entry it was built from, not fresher; and it is
    # built again once one of them is due for its refresh-ahead, which only a read of it starts.
    state.answer_keep(key, min(cache_only.fresh_until, cache_only.refresh_at), found)
    return found


def _unasked(failed: Failed) -> str:
    return "; ".join(str(exc) for _h, exc in sorted(failed.values(), key=lambda he: he[0].site.name))


def _complete_or_refuse(
    query: str, rows: Sequence[tuple[_Handle, VmRow]], handles: Sequence[_Handle], failed: Failed
) -> str | None:
    """Whether the rows of the one VM found are all its VPGs although ``failed`` sites were not asked (see the
    module); the note for the answer (None when every site answered). Complete when the VM's protected site's
    ZVM answered, or that site is not configured here; ``SitesUnavailableError`` when it, or a site whose
    identity is not known yet, could not be asked."""
    if not failed:
        return None
    names = ", ".join(h.site.name for h, _exc in sorted(failed.values(), key=lambda he: he[0].site.name))
    note = f"sites not asked (unavailable): {names}; the VM's own site answered, so its VPGs are complete"
    if any(row.protected_site.is_local for _h, row in rows):
        return note
    protected = {row.protected_site.identifier for _h, row in rows if row.protected_site.identifier}
    suspects = [(h, exc) for h, exc in failed.values() if not h.site.identifier or h.site.identifier in protected]
    if suspects:
        vm = rows[0][1].vm_name or query
        where = "; ".join(str(exc) for _h, exc in suspects)
        raise SitesUnavailableError(
            f"VM {vm!r} is protected at a site whose ZVM could not be asked, so its VPGs cannot be listed "
            f"completely: {where}",
            sites=[h.site.name for h, _exc in suspects],
        )
    return (
        f"sites not asked (unavailable): {names}; the VM's protected site is not configured here, "
        "so its VPGs are those its peers list"
    )


def _lookup(vm: str, site_rows: list[Site], resolver: Resolver) -> Protection:
    query = check_vm_query(vm)
    if not site_rows:
        raise ApplicationError("no ZVM site is configured here")
    handles = [_Handle(site, state.client_for(site)) for site in site_rows]
    failed: Failed = {}
    rows = _matching_rows(query, handles, resolver, failed)
    candidates = _candidates(rows)
    if not candidates:
        if failed:
            raise SitesUnavailableError(
                f"no site that answered knows a VM matching {query!r}, and these could not be asked: "
                f"{_unasked(failed)}",
                sites=[h.site.name for h, _exc in failed.values()],
            )
        names = ", ".join(h.site.name for h in handles)
        raise VmNotFoundError(
            f"no protected VM matches {query!r} on sites {names} (tried vmIdentifier, VM name, the short name "
            "of an FQDN and DNS → IP addresses)"
        )
    if len(candidates) > 1:
        raise VmAmbiguousError(query, candidates)
    note = _complete_or_refuse(query, rows, handles, failed)
    answering = [h for h in handles if h.site.pk not in failed]
    sites = _Sites(handles, _fan_out(answering, _directory, failed))
    vpgs = tuple(_vpg_protection(h, row, sites) for h, row in _one_row_per_vpg(rows))
    if failed and note is None:  # a site failed only while reading its directory
        note = f"sites not asked (unavailable): {_unasked(failed)}"
    return Protection(
        vm_identifier=candidates[0].identifier,
        vm_name=candidates[0].name,
        vpgs=vpgs,
        unavailable_sites=tuple(sorted(h.site.name for h, _exc in failed.values())),
        note=note,
    )
