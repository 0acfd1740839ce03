"""OAuth sign-in for agents: the authorization server behind /mcp (django-oauth-toolkit; docs/oauth.md).

A host that speaks only the MCP authorization flow finds it from the 401 of /mcp, registers, and sends a person
to the consent page to pick the agent it acts as; its tokens are bound to this /mcp (RFC 8707).
"""
