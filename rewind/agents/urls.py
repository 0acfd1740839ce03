"""REST routes of agents: /api/agents/ (names in the ``rewind-api`` namespace, see rewind.api_urls)."""

from __future__ import annotations

from django.urls import path

from rewind.agents import api

urlpatterns = [
    path("agents/", api.AgentListApi.as_view(), name="agent-list"),
    path("agents/<int:pk>/", api.AgentDetailApi.as_view(), name="agent-detail"),
    path("agents/<int:pk>/tokens/", api.AgentTokenIssueApi.as_view(), name="agent-token-issue"),
    path("agents/<int:pk>/tokens/<int:token_id>/revoke/", api.AgentTokenRevokeApi.as_view(), name="agent-token-revoke"),
]
