"""REST routes under /api/catalog/."""

from __future__ import annotations

from django.urls import path

from catalog import api

app_name = "catalog-api"

urlpatterns = [
    path("tools/", api.MutatingToolListApi.as_view(), name="tool-list"),
    path("tools/<int:pk>/", api.MutatingToolDetailApi.as_view(), name="tool-detail"),
    path("tools/<int:pk>/disable/", api.MutatingToolDisableApi.as_view(), name="tool-disable"),
    path("sightings/", api.ToolSightingListApi.as_view(), name="sighting-list"),
    path("sightings/<int:pk>/classify/", api.ToolSightingClassifyApi.as_view(), name="sighting-classify"),
]
