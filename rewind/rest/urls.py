"""REST routes of the rewind app: /api/audit/, /api/sites/, /api/guards/, /api/agents/."""

from __future__ import annotations

from django.urls import include, path

from rewind.rest import agents, audit, sites

app_name = "rewind-api"

urlpatterns = [
    path("audit/", audit.AuditEventListApi.as_view(), name="audit-list"),
    path("audit/verify/", audit.AuditVerifyApi.as_view(), name="audit-verify"),
    path("audit/<int:seq>/", audit.AuditEventDetailApi.as_view(), name="audit-detail"),
    path("sites/", sites.SiteListApi.as_view(), name="site-list"),
    path("sites/<int:pk>/", sites.SiteDetailApi.as_view(), name="site-detail"),
    path("sites/<int:pk>/check/", sites.SiteCheckApi.as_view(), name="site-check"),
    path("", include("rewind.checkpoints.urls")),
    path("agents/", agents.AgentListApi.as_view(), name="agent-list"),
    path("agents/<int:pk>/", agents.AgentDetailApi.as_view(), name="agent-detail"),
    path("agents/<int:pk>/tokens/", agents.AgentTokenIssueApi.as_view(), name="agent-token-issue"),
    path("agents/<int:pk>/tokens/<int:token_id>/revoke/", agents.AgentTokenRevokeApi.as_view(),
         name="agent-token-revoke"),
]
