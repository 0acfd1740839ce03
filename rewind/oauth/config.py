"""django-oauth-toolkit's settings (``OAUTH2_PROVIDER``) as this service uses it; read by ``rewind.settings``.

Only what the MCP authorization specification asks for: the code grant with PKCE S256, refresh tokens rotated on
every use, public clients, tokens stored as hashes, resource indicators, Client ID Metadata Documents and
Dynamic Client Registration. No Django import: the settings read this before Django is set up.
"""

from __future__ import annotations

from rewind.mcp import scopes


def oauth2_provider_settings(
    *,
    public_url: str | None,
    dcr: bool,
    cimd: bool,
    cimd_timeout_s: float,
    access_token_s: int,
    refresh_token_s: int,
) -> dict[str, object]:
    """``public_url``: REWIND_PUBLIC_URL when configured (the issuer then never depends on a request's Host)."""
    return {
        "SCOPES": dict(scopes.DESCRIPTIONS),
        "DEFAULT_SCOPES": list(scopes.ALL),
        "PKCE_REQUIRED": True,
        "OAUTH2_VALIDATOR_CLASS": "rewind.oauth.validators.RewindOAuth2Validator",
        "ACCESS_TOKEN_EXPIRE_SECONDS": access_token_s,
        "REFRESH_TOKEN_EXPIRE_SECONDS": refresh_token_s,
        "AUTHORIZATION_CODE_EXPIRE_SECONDS": 60,
        "ROTATE_REFRESH_TOKEN": True,
        "REFRESH_TOKEN_REUSE_PROTECTION": True,
        "REQUEST_APPROVAL_PROMPT": "force",  # every authorization asks the person which agent
        "ALLOWED_REDIRECT_URI_SCHEMES": ["http", "https"],
        # RFC 8252 section 7.3: a native client listens on a loopback port it picks at run time.
        "ALLOW_LOCALHOST_LOOPBACK": True,
        "COMPLIANT_BCP_RFC9700_IMPLICIT_GRANT": True,
        "COMPLIANT_BCP_RFC9700_PASSWORD_GRANT": True,
        "COMPLIANT_BCP_RFC9700_PKCE_METHOD": True,
        "COMPLIANT_BCP_RFC9700_ACCESS_TOKEN_TRANSPORT": True,
        "COMPLIANT_BCP_RFC9700_AUTHZ_RESPONSE_ISS": True,
        "COMPLIANT_BCP_RFC9700_TOKEN_STORAGE": True,
        "COMPLIANT_BCP_RFC9700_REFRESH_TOKEN": True,
        "COMPLIANT_BCP_RFC9700_PKCE_REQUIRED": True,
        "OAUTH2_RESPONSE_TYPES_SUPPORTED": ["code"],
        "OAUTH2_GRANT_TYPES_SUPPORTED": ["authorization_code", "refresh_token"],
        "OAUTH2_TOKEN_ENDPOINT_AUTH_METHODS_SUPPORTED": ["none"],
        "OIDC_ISS_ENDPOINT": public_url or "",
        "DCR_ENABLED": dcr,
        # Open registration: a registered client gets nothing until a person consents.
        "DCR_REGISTRATION_PERMISSION_CLASSES": ("oauth2_provider.dcr.AllowAllDCRPermission",),
        "CIMD_ENABLED": cimd,
        "CIMD_METADATA_FETCHER": "rewind.oauth.cimd.MetadataFetcher",
        "CIMD_FETCH_TIMEOUT_SECONDS": cimd_timeout_s,
        "OAUTH2_PROTECTED_RESOURCE_NAME": "zerto-rewind MCP",
    }
