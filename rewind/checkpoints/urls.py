"""REST routes of guards: /api/guards/ (names in the ``rewind-api`` namespace, see rewind.api_urls)."""

from __future__ import annotations

from django.urls import path

from rewind.checkpoints import api

urlpatterns = [
    path("guards/", api.GuardListApi.as_view(), name="guard-list"),
    path("guards/<int:pk>/", api.GuardDetailApi.as_view(), name="guard-detail"),
]
