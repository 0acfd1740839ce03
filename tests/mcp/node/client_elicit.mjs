// The official TypeScript SDK v2 as a client that declares URL-mode elicitation (2026-07-28, auto-negotiated).
// Usage: node client_elicit.mjs URL TOKEN ACTION TOOL ARGS_JSON   (ACTION: accept | decline | cancel)
// Answers every URL elicitation with ACTION (the SDK then retries the call itself) and prints one JSON line:
// the negotiated protocol version, the elicitations it was asked, and the call's final result.
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

const [url, token, action, tool, argsJson] = process.argv.slice(2);
const client = new Client(
  { name: 'rewind-tests-elicit', version: '1.0.0' },
  { versionNegotiation: { mode: 'auto' }, capabilities: { elicitation: { url: {} } } },
);
const elicitations = [];
client.setRequestHandler('elicitation/create', async (request) => {
  const { mode, message, url: page } = request.params;
  elicitations.push({ mode, message, url: page });
  return { action };
});
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
try {
  await client.connect(transport);
  const result = await client.callTool(
    { name: tool, arguments: JSON.parse(argsJson) },
    // The retry waits for a person: progress keeps it alive, the bound only stops a hang.
    { timeout: 300000, resetTimeoutOnProgress: true, onprogress: () => {} },
  );
  console.log(JSON.stringify({
    protocolVersion: transport.protocolVersion ?? null,
    elicitations,
    isError: result.isError ?? false,
    text: (result.content ?? []).map((c) => c.text ?? '').join('\n'),
    meta: result._meta ?? null,
  }));
  await client.close();
} catch (err) {
  console.log(JSON.stringify({ error: String(err && err.message ? err.message : err), elicitations }));
  process.exitCode = 2;
}
