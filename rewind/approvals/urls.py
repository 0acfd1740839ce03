"""REST routes of calls held for a person: /api/approvals/... (names in the ``rewind-api`` namespace)."""

from __future__ import annotations

from django.urls import path

from rewind.approvals import api

urlpatterns = [
    path("approvals/", api.HeldCallListApi.as_view(), name="held-call-list"),
    path("approvals/<int:pk>/", api.HeldCallDetailApi.as_view(), name="held-call-detail"),
    path("approvals/<int:pk>/approve/", api.HeldCallApproveApi.as_view(), name="held-call-approve"),
    path("approvals/<int:pk>/deny/", api.HeldCallDenyApi.as_view(), name="held-call-deny"),
]
