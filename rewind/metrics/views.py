"""``GET /metrics``: the Prometheus exposition of ``rewind.metrics.collectors``."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client.exposition import choose_encoder

from rewind.metrics.access import refusal
from rewind.metrics.collectors import REGISTRY


@require_GET
@never_cache
def metrics_view(request: HttpRequest) -> HttpResponse:
    refused = refusal(request)
    if refused is not None:
        return refused
    # The text format, or OpenMetrics when the scraper asks for it.
    encode, content_type = choose_encoder(request.headers.get("Accept", ""))
    return HttpResponse(encode(REGISTRY), content_type=content_type)
