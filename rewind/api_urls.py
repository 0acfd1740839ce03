"""REST API routes; each app adds its own module here."""

from __future__ import annotations

from django.urls import URLPattern, URLResolver, include, path

urlpatterns: list[URLPattern | URLResolver] = [
    path("recoveries/", include("recoveries.urls")),
    path("catalog/", include("catalog.urls")),
    path("", include("rewind.rest.urls")),
]
