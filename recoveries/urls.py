"""REST routes under /api/recoveries/."""

from __future__ import annotations

from django.urls import path

from recoveries import api
from recoveries.restore import api as restore_api

app_name = "recoveries-api"

urlpatterns = [
    path("", api.RecoveryListApi.as_view(), name="list"),
    path("<int:pk>/", api.RecoveryDetailApi.as_view(), name="detail"),
    path("<int:pk>/approve/", api.RecoveryApproveApi.as_view(), name="approve"),
    path("<int:pk>/deny/", api.RecoveryDenyApi.as_view(), name="deny"),
    path("<int:pk>/download/", api.RecoveryDownloadApi.as_view(), name="download"),
    path("<int:pk>/diff/", restore_api.RecoveryDiffApi.as_view(), name="diff"),
    path("<int:pk>/write-back/", restore_api.RecoveryWriteBackApi.as_view(), name="write-back"),
    path("<int:pk>/no-write-back/", restore_api.RecoveryNoWriteBackApi.as_view(), name="no-write-back"),
    path("guest-file-tools/", restore_api.GuestFileToolsListApi.as_view(), name="guest-file-tools"),
    path("guest-file-tools/<int:pk>/", restore_api.GuestFileToolsDetailApi.as_view(), name="guest-file-tools-detail"),
]
