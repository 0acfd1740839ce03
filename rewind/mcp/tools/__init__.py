"""MCP tools. Each module here has ``register(server)``; ``rewind.mcp.server`` calls it."""
