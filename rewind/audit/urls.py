"""REST routes of the audit log: /api/audit/ (names in the ``rewind-api`` namespace, see rewind.api_urls)."""

from __future__ import annotations

from django.urls import path

from rewind.audit import api

urlpatterns = [
    path("audit/", api.AuditEventListApi.as_view(), name="audit-list"),
    path("audit/verify/", api.AuditVerifyApi.as_view(), name="audit-verify"),
    path("audit/<int:seq>/", api.AuditEventDetailApi.as_view(), name="audit-detail"),
]
