"""REST routes of the guards (the other parts' routes are included by rewind.api_urls)."""

from __future__ import annotations

from django.urls import include, path

urlpatterns = [
    path("", include("rewind.checkpoints.urls")),
]
