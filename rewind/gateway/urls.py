"""REST routes of the gateway: /api/gateway/... (names in the ``rewind-api`` namespace)."""

from __future__ import annotations

from django.urls import path

from rewind.gateway import api

urlpatterns = [
    path("gateway/upstreams/", api.UpstreamListApi.as_view(), name="upstream-list"),
    path("gateway/upstreams/<int:pk>/", api.UpstreamDetailApi.as_view(), name="upstream-detail"),
    path("gateway/upstreams/<int:pk>/check/", api.UpstreamCheckApi.as_view(), name="upstream-check"),
    path("gateway/tools/<int:pk>/policy/", api.UpstreamToolPolicyApi.as_view(), name="upstream-tool-policy"),
    path("gateway/tools/<int:pk>/approve/", api.UpstreamToolApproveApi.as_view(), name="upstream-tool-approve"),
    path("gateway/calls/", api.GatewayCallListApi.as_view(), name="gateway-call-list"),
]
