"""The remote MCP endpoint: the SDK's streamable-HTTP app, agent tokens, audited tools."""
