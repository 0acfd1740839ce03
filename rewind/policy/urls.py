"""REST routes of the policy: /api/policy/ and /api/stops/... (names in the ``rewind-api`` namespace)."""

from __future__ import annotations

from django.urls import path

from rewind.policy import api

urlpatterns = [
    path("policy/", api.PolicyApi.as_view(), name="policy"),
    path("stops/", api.StopListApi.as_view(), name="stop-list"),
    path("stops/<int:pk>/lift/", api.StopLiftApi.as_view(), name="stop-lift"),
]
