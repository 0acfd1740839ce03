"""Who may read ``/metrics``: the holder of ``REWIND_METRICS_TOKEN`` and/or a caller from
``REWIND_METRICS_ALLOWED_NETWORKS`` (both, when both are set). With neither nobody may: the metrics name sites,
tools and agents' activity, and a deployment that forgot to choose should not publish them.
"""

from __future__ import annotations

import hmac
import ipaddress

from django.conf import settings
from django.http import HttpRequest, HttpResponse


def refusal(request: HttpRequest) -> HttpResponse | None:
    """None when ``request`` may read the metrics, else the answer that refuses it."""
    token: str | None = settings.REWIND_METRICS_TOKEN
    networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = settings.REWIND_METRICS_ALLOWED_NETWORKS
    if not token and not networks:
        return _refused(403, "metrics are off: set REWIND_METRICS_TOKEN or REWIND_METRICS_ALLOWED_NETWORKS")
    if networks and not _from(request, networks):
        return _refused(403, "metrics are not served to this address")
    if token and not _bearer_matches(request, token):
        response = _refused(401, "metrics need the bearer token of REWIND_METRICS_TOKEN")
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    return None


def _bearer_matches(request: HttpRequest, token: str) -> bool:
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode())


def _from(request: HttpRequest, networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network]) -> bool:
    try:
        address = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return any(address in network for network in networks)


def _refused(status: int, message: str) -> HttpResponse:
    return HttpResponse(message + "\n", status=status, content_type="text/plain; charset=utf-8")
