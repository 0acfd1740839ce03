"""Fetching a client's metadata document (a Client ID Metadata Document) without becoming a proxy into the network.

A client whose ``client_id`` is an https URL makes this service fetch it, so the URL must not reach what only
this service can reach. The fetch is django-oauth-toolkit's with the checks of its own private fetch (https
only, every resolved address checked, the connection made to the checked address, no redirects, one deadline);
the address rule is ours: globally routable, or in REWIND_OAUTH_CIMD_ALLOWED_NETWORKS (empty by default).
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
import time
from typing import Any
from urllib.parse import ParseResult, urlparse

import urllib3
from django.conf import settings
from oauth2_provider.cimd import CIMDError, SafeMetadataFetcher
from oauth2_provider.settings import oauth2_settings

NAT64 = ipaddress.ip_network("64:ff9b::/96")


def _judged(
    address: ipaddress.IPv4Address | ipaddress.IPv6Address,
) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """The addresses to judge: an IPv6 address carrying an IPv4 one (mapped, 6to4, Teredo, NAT64) is judged by what
    it carries, which ``is_global`` may misjudge, so a crafted AAAA record cannot smuggle an internal IPv4 (the
    cloud metadata address) past the rule."""
    if not isinstance(address, ipaddress.IPv6Address):
        return [address]
    if address.teredo is not None:
        return list(address.teredo)
    embedded = address.ipv4_mapped or address.sixtofour
    if embedded is None and address in NAT64:
        embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return [embedded] if embedded is not None else [address]


def address_allowed(ip: str) -> bool:
    """A globally routable address, or one in the networks the operator allowed."""
    try:
        address = ipaddress.ip_address(ip)
    except ValueError:
        return False
    if all(a.is_global for a in _judged(address)):
        return True
    return any(address in network for network in settings.REWIND_OAUTH_CIMD_ALLOWED_NETWORKS)


def client_id_url(client_id: str) -> ParseResult:
    """The client id as a URL the CIMD draft allows (section 3), else ``CIMDError`` saying why."""
    parsed = urlparse(client_id)
    try:
        parsed.port  # noqa: B018 - an out-of-range port raises here
    except ValueError:
        raise CIMDError("client_id URL has an invalid port") from None
    problems = [
        (parsed.scheme != "https", "must use the https scheme"),
        (not parsed.hostname, "must contain a host"),
        (bool(parsed.username or parsed.password), "must not contain a userinfo component"),
        (bool(parsed.fragment), "must not contain a fragment component"),
        (not parsed.path, "must contain a path component"),
        (any(seg in (".", "..") for seg in parsed.path.split("/")), "must not contain dot path segments"),
    ]
    for failed, why in problems:
        if failed:
            raise CIMDError(f"client_id URL {why}")
    return parsed


def resolve_checked(hostname: str, port: int) -> list[str]:
    """Every address ``hostname`` resolves to, all of them allowed; else ``CIMDError`` naming the first that is not."""
    try:
        infos = socket.getaddrinfo(hostname, port, proto=socket.IPPROTO_TCP)
    except socket.gaierror as exc:
        raise CIMDError(f"could not resolve client_id host: {exc}") from exc
    ips = [str(info[4][0]) for info in infos]
    for ip in ips:
        if not address_allowed(ip):
            raise CIMDError(f"client_id host resolves to a non-public address ({ip})")
    if not ips:
        raise CIMDError("client_id host did not resolve to any address")
    return ips


class MetadataFetcher(SafeMetadataFetcher):
    """django-oauth-toolkit's fetcher with the address rule above (its own allows public addresses only)."""

    def fetch(self, client_id: str) -> tuple[dict[str, Any], int]:
        parsed = client_id_url(client_id)
        assert parsed.hostname is not None  # client_id_url refuses a URL without one
        port = parsed.port or 443
        ips = resolve_checked(parsed.hostname, port)
        timeout = oauth2_settings.CIMD_FETCH_TIMEOUT_SECONDS
        path = parsed.path + (f"?{parsed.query}" if parsed.query else "")
        headers = {"Host": parsed.netloc, "Accept": "application/json, application/*+json"}
        deadline = time.monotonic() + timeout  # one deadline however many addresses
        last: Exception | None = None
        for ip in ips:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            # The checked address, with SNI, the certificate and Host on the real name: a second
            # DNS answer cannot move the connection elsewhere.
            pool = urllib3.HTTPSConnectionPool(
                host=ip,
                port=port,
                timeout=urllib3.Timeout(connect=remaining, read=remaining, total=remaining),
                retries=False,
                maxsize=1,
                ssl_context=ssl.create_default_context(),
                server_hostname=parsed.hostname,
            )
            try:
                response = pool.urlopen("GET", path, headers=headers, redirect=False, preload_content=False)
                try:
                    return self._read_document(response)
                finally:
                    response.release_conn()
            except urllib3.exceptions.HTTPError as exc:
                last = exc
            finally:
                pool.close()
        raise CIMDError(f"could not fetch client_id document: {last or 'no time left'}")
