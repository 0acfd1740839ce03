"""Gateway mode: zerto-rewind connects to the agent's other MCP servers and re-exports their tools.

Every forwarded call that could change a protected VM is guarded first, whether or not the agent
asked (``policy``); every forwarded call gets a call id and a start time, so a change nobody
guarded can still be undone from the journal (``recoveries.before_call``).

Modules: ``models`` (upstreams, their tools, forwarded calls), ``naming`` (exposed names that
every host accepts), ``services`` (state changes), ``links`` (the SDK client sessions to each
upstream, pooled per process), ``listing`` (refresh an upstream's tool list), ``policy`` (what a
call may do before it is forwarded), ``forward`` (one call end to end), ``mcp_tools`` (the
provider the MCP server asks for tools it does not hold itself).
"""
