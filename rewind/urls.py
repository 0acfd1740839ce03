from __future__ import annotations

from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView

from rewind.lib.rest.docs import docs_view, schema_view
from rewind.metrics.views import metrics_view
from rewind.probes import health, ready

handler404 = "rewind.api.page_not_found"

urlpatterns = [
    path("", RedirectView.as_view(url="/admin/", permanent=False)),
    path("health/", health, name="health"),
    path("ready/", ready, name="ready"),
    path("metrics", metrics_view, name="metrics"),
    path("admin/", admin.site.urls),
    # Beside the API's routes, not among them: the schema describes rewind.api_urls and nothing else.
    path("api/schema/", schema_view, name="api-schema"),
    path("api/docs/", docs_view, name="api-docs"),
    path("api/", include("rewind.api_urls")),
    # The authorization server of agents' OAuth sign-in and its metadata (well-known paths at the root).
    path("", include("rewind.oauth.urls")),
]
