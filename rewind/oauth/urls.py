"""The authorization server's routes, at the root of the service: the metadata at the well-known paths clients look
at (RFC 8414, RFC 9728), the endpoints under /oauth/. The namespace is django-oauth-toolkit's own: its metadata
view names the endpoints by it.
"""

from __future__ import annotations

from django.urls import path
from oauth2_provider import views as dot

from rewind.mcp.endpoint import PROTECTED_RESOURCE_METADATA_PATH
from rewind.oauth.views import ConsentView, ProtectedResourceMetadataView, TokenView

app_name = "oauth2_provider"

_resource_metadata = PROTECTED_RESOURCE_METADATA_PATH.lstrip("/")

urlpatterns = [
    path(".well-known/oauth-authorization-server", dot.OAuthServerMetadataView.as_view(), name="oauth-server-metadata"),
    path(_resource_metadata, ProtectedResourceMetadataView.as_view(), name="oauth-resource-metadata"),
    path(f"{_resource_metadata}/<path:resource_path>", ProtectedResourceMetadataView.as_view()),
    path("oauth/authorize/", ConsentView.as_view(), name="authorize"),
    path("oauth/token/", TokenView.as_view(), name="token"),
    path("oauth/revoke/", dot.RevokeTokenView.as_view(), name="revoke-token"),
    path("oauth/register/", dot.DynamicClientRegistrationView.as_view(), name="dcr-register"),
    path(
        "oauth/register/<str:client_id>/",
        dot.DynamicClientRegistrationManagementView.as_view(),
        name="dcr-register-management",
    ),
]
