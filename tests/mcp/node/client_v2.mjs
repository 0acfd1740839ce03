// An external MCP client for the tests: the official TypeScript SDK v2 (@modelcontextprotocol/client).
// Usage: node client_v2.mjs URL TOKEN MODE VM   (MODE: legacy | auto)
// Prints one JSON line: negotiated protocol version, tool names, the zerto_find_protection result.
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

const [url, token, mode, vm] = process.argv.slice(2);
const client = new Client({ name: 'rewind-tests', version: '1.0.0' }, { versionNegotiation: { mode } });
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
try {
  await client.connect(transport);
  const tools = await client.listTools();
  const result = await client.callTool({ name: 'zerto_find_protection', arguments: { vm } });
  const out = {
    protocolVersion: transport.protocolVersion ?? null,
    tools: tools.tools.map((t) => ({ name: t.name, readOnlyHint: t.annotations?.readOnlyHint ?? null, hasOutputSchema: !!t.outputSchema })),
    isError: result.isError ?? false,
    structuredContent: result.structuredContent ?? null,
    text: (result.content ?? []).map((c) => c.text ?? '').join('\n'),
  };
  console.log(JSON.stringify(out));
  await client.close();
} catch (err) {
  console.log(JSON.stringify({ error: String(err && err.message ? err.message : err) }));
  process.exitCode = 2;
}
