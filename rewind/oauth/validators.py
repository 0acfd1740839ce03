"""django-oauth-toolkit's request validator, with the one resource this service issues tokens for, and the
scopes hosts send out of habit left out rather than refused."""

from __future__ import annotations

from typing import Any

from oauth2_provider.models import get_grant_model
from oauth2_provider.oauth2_validators import OAuth2Validator
from oauthlib.oauth2.rfc6749 import errors
from oauthlib.oauth2.rfc6749.grant_types.authorization_code import (
    code_challenge_method_plain,
    code_challenge_method_s256,
)

from rewind.mcp.endpoint import mcp_resource, same_resource

# Scopes this service does not offer that hosts commonly ask for (OpenID Connect habits): left out of
# the grant, never a reason to refuse the request; the consent page says so, with why it does not matter.
DROPPED_SCOPES = {
    "openid": "a sign-in identity (OpenID Connect): this service issues no ID tokens",
    "profile": "your name and profile (OpenID Connect): this service gives the client none",
    "offline_access": "refresh tokens: every grant here comes with one",
}


def _request_origin(request: Any) -> str:
    """The address an oauthlib request came to (its ``uri`` is only the path): Django's META, as the toolkit copies it."""
    headers = request.headers
    scheme = "https" if headers.get("X_DJANGO_OAUTH_TOOLKIT_SECURE") else "http"
    return f"{scheme}://{headers.get('HTTP_HOST') or headers.get('SERVER_NAME', 'localhost')}/"


_VERIFIERS = {"S256": code_challenge_method_s256, "plain": code_challenge_method_plain}


class RewindOAuth2Validator(OAuth2Validator):
    def get_code_challenge_method(self, code: str, request: Any) -> str | None:
        """The toolkit's read, and: a code redeemed with a verifier that does not match its challenge is used up
        there and then, so whoever holds a stolen code gets one try, not as many as they like."""
        found = (
            get_grant_model()
            .objects.filter(code=code, application=request.client)
            .values_list("code_challenge", "code_challenge_method")
            .first()
        )
        if found is None:
            return None
        challenge, method = found
        check = _VERIFIERS.get(method or "")
        if challenge and request.code_verifier and (check is None or not check(request.code_verifier, challenge)):
            get_grant_model().objects.filter(code=code, application=request.client).delete()
        return method or None

    def validate_scopes(
        self, client_id: str, scopes: list[str], client: Any, request: Any, *args: Any, **kwargs: Any
    ) -> bool:
        """The toolkit's check, once ``DROPPED_SCOPES`` are taken out of the request (kept on it as
        ``dropped_scopes``); a request that asked for nothing else gets the default scopes."""
        dropped = [s for s in scopes if s in DROPPED_SCOPES]
        if dropped:
            request.dropped_scopes = dropped
            request.scopes = [s for s in scopes if s not in DROPPED_SCOPES] or list(
                self.get_default_scopes(client_id, request)
            )
        return bool(super().validate_scopes(client_id, request.scopes if dropped else scopes, client, request))

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
