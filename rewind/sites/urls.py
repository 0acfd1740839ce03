"""REST routes of sites: /api/sites/ (names in the ``rewind-api`` namespace, see rewind.api_urls)."""

from __future__ import annotations

from django.urls import path

from rewind.sites import api

urlpatterns = [
    path("sites/", api.SiteListApi.as_view(), name="site-list"),
    path("sites/<int:pk>/", api.SiteDetailApi.as_view(), name="site-detail"),
    path("sites/<int:pk>/check/", api.SiteCheckApi.as_view(), name="site-check"),
]
