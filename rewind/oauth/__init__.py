"""OAuth sign-in for agents: the authorization server behind /mcp (django-oauth-toolkit).

A host that speaks only the MCP authorization flow discovers this server from the 401 of /mcp,
registers (a Client ID Metadata Document, or Dynamic Client Registration), and sends a person to
the consent page, where they sign in and pick the agent the host acts as. Its tokens are bound to
this service's /mcp (RFC 8707) and carry the scopes the person granted.
"""
