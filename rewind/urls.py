from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest, JsonResponse
from django.urls import include, path
from django.views.generic import RedirectView

from rewind.metrics.views import metrics_view
from rewind.rest.docs import docs_view, schema_view

handler404 = "rewind.api.page_not_found"


def health(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"ok": True})


urlpatterns = [
    path("", RedirectView.as_view(url="/admin/", permanent=False)),
    path("health/", health, name="health"),
    path("metrics", metrics_view, name="metrics"),
    path("admin/", admin.site.urls),
    # Beside the API's routes, not among them: the schema describes rewind.api_urls and nothing else.
    path("api/schema/", schema_view, name="api-schema"),
    path("api/docs/", docs_view, name="api-docs"),
    path("api/", include("rewind.api_urls")),
]
