// An MCP host that speaks only the authorization flow: the official TypeScript SDK v2's OAuth client
// provider (discovery from the 401, registration by metadata document or DCR, PKCE, the token exchange).
// Usage: node oauth_client.mjs URL VM [CLIENT_METADATA_URL]
// Prints {"authorize": URL} when a person must sign in, then reads the URL the browser was sent back to
// from its standard input; finally prints one JSON line: the client_id it used, tool names, the
// zerto_find_protection result.
import { Client, StreamableHTTPClientTransport, UnauthorizedError } from '@modelcontextprotocol/client';
import readline from 'node:readline';

const [url, vm, clientMetadataUrl] = process.argv.slice(2);
const CALLBACK = 'http://127.0.0.1:33418/callback';
const kept = {};
const provider = {
  get redirectUrl() { return CALLBACK; },
  clientMetadataUrl: clientMetadataUrl || undefined,
  get clientMetadata() {
    return {
      client_name: 'TypeScript host',
      redirect_uris: [CALLBACK],
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      token_endpoint_auth_method: 'none',
    };
  },
  state() { return (kept.state ??= crypto.randomUUID()); },
  clientInformation() { return kept.client; },
  saveClientInformation(info) { kept.client = info; },
  tokens() { return kept.tokens; },
  saveTokens(tokens) { kept.tokens = tokens; },
  redirectToAuthorization(authorizationUrl) { console.log(JSON.stringify({ authorize: authorizationUrl.toString() })); },
  saveCodeVerifier(verifier) { kept.verifier = verifier; },
  codeVerifier() { return kept.verifier; },
};
const input = readline.createInterface({ input: process.stdin });
const nextLine = () => new Promise((resolve) => input.once('line', resolve));

async function session() {
  const client = new Client({ name: 'rewind-oauth-tests', version: '1.0.0' }, { versionNegotiation: { mode: 'auto' } });
  const transport = new StreamableHTTPClientTransport(new URL(url), { authProvider: provider });
  try {
    await client.connect(transport);
    return client;
  } catch (err) {
    if (!(err instanceof UnauthorizedError)) throw err;
    const back = new URL(await nextLine());
    await transport.finishAuth(back.searchParams);
    const signedIn = new Client({ name: 'rewind-oauth-tests', version: '1.0.0' }, { versionNegotiation: { mode: 'auto' } });
    await signedIn.connect(new StreamableHTTPClientTransport(new URL(url), { authProvider: provider }));
    return signedIn;
  }
}

try {
  const client = await session();
  const tools = await client.listTools();
  const result = await client.callTool({ name: 'zerto_find_protection', arguments: { vm } });
  console.log(JSON.stringify({
    clientId: kept.client?.client_id ?? null,
    scope: kept.tokens?.scope ?? null,
    tools: tools.tools.map((t) => t.name),
    isError: result.isError ?? false,
    structuredContent: result.structuredContent ?? null,
  }));
  await client.close();
} catch (err) {
  console.log(JSON.stringify({ error: String(err && err.stack ? err.stack : err) }));
  process.exitCode = 2;
} finally {
  input.close();
}
