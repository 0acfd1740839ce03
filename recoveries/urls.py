"""REST routes under /api/recoveries/."""

from __future__ import annotations

from django.urls import path

from recoveries import api

app_name = "recoveries-api"

urlpatterns = [
    path("", api.RecoveryListApi.as_view(), name="list"),
    path("<int:pk>/", api.RecoveryDetailApi.as_view(), name="detail"),
    path("<int:pk>/approve/", api.RecoveryApproveApi.as_view(), name="approve"),
    path("<int:pk>/deny/", api.RecoveryDenyApi.as_view(), name="deny"),
    path("<int:pk>/download/", api.RecoveryDownloadApi.as_view(), name="download"),
]
