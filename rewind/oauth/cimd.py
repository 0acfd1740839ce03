"""Fetching a client's metadata document (a Client ID Metadata Document) without becoming a proxy into the network.

A client that names an https URL as its ``client_id`` makes this service fetch that URL during the
authorization request, so the URL must not reach what only this service can reach. The fetch is
django-oauth-toolkit's own (https only, every address the host resolves to checked, the connection
made to the checked address, no redirects, one deadline for the whole fetch, the body cut at its
size limit); the rule for which addresses are fine is ours: a globally routable address, or one in
REWIND_OAUTH_CIMD_ALLOWED_NETWORKS (empty by default: no private, loopback or link-local address).
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
import time
from typing import Any

import urllib3
from django.conf import settings
from oauth2_provider.cimd import CIMDError, SafeMetadataFetcher, _ip_is_public, _validate_client_id_url
from oauth2_provider.settings import oauth2_settings


def address_allowed(ip: str) -> bool:
    """A public address, or one of the networks the operator allowed."""
    if _ip_is_public(ip):
        return True
    try:
        address = ipaddress.ip_address(ip)
    except ValueError:
        return False
    return any(address in network for network in settings.REWIND_OAUTH_CIMD_ALLOWED_NETWORKS)


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
        parsed = _validate_client_id_url(client_id)
        assert parsed.hostname is not None  # _validate_client_id_url refuses a URL without one
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
