"""django-oauth-toolkit's request validator, with the one resource this service issues tokens for."""

from __future__ import annotations

from typing import Any

from oauth2_provider.oauth2_validators import OAuth2Validator
from oauthlib.oauth2.rfc6749 import errors

from rewind.mcp.endpoint import mcp_resource, same_resource


def _request_origin(request: Any) -> str:
    """The address an oauthlib request came to (its ``uri`` is only the path): Django's META, as the toolkit copies it."""
    headers = request.headers
    scheme = "https" if headers.get("X_DJANGO_OAUTH_TOOLKIT_SECURE") else "http"
    return f"{scheme}://{headers.get('HTTP_HOST') or headers.get('SERVER_NAME', 'localhost')}/"


class RewindOAuth2Validator(OAuth2Validator):
    def _check_and_set_request_resource(self, request: Any) -> None:
        """Every token is for this service's /mcp: a request naming another resource is refused
        (``invalid_target``, RFC 8707 section 2), one naming none gets ours."""
        super()._check_and_set_request_resource(request)
        ours = mcp_resource(_request_origin(request))
        for resource in request.resource:
            if not same_resource(resource, ours):
                raise errors.CustomOAuth2Error(
                    error="invalid_target",
                    description=f"this server issues tokens only for {ours}, not for {resource}",
                    request=request,
                )
        request.resource = [ours]
