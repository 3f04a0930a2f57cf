// An MCP client that is given only capgate's MCP URL and its own client credentials:
// the official TypeScript SDK meets `401` + `WWW-Authenticate: Bearer resource_metadata=…`,
// reads capgate's protected-resource metadata (RFC 9728), discovers the authorization
// server it names, gets a token for the resource (client_credentials, RFC 8707 `resource`)
// and calls again. Run by host/gateway/tests/all/oidc_identity.rs.
//
//   node oauth_client_check.mjs MCP_URL CLIENT_ID CLIENT_SECRET
//
// Prints one JSON line: {"authorizationServers", "tokenAudience", "tools"}.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ClientCredentialsProvider } from '@modelcontextprotocol/sdk/client/auth-extensions.js';
import { discoverOAuthProtectedResourceMetadata } from '@modelcontextprotocol/sdk/client/auth.js';

const [url, clientId, clientSecret] = process.argv.slice(2);
if (!url || !clientId || !clientSecret) {
  console.error('usage: node oauth_client_check.mjs MCP_URL CLIENT_ID CLIENT_SECRET');
  process.exit(2);
}

// No `expectedIssuer`: the point is that the client learns the issuer from capgate.
const provider = new ClientCredentialsProvider({ clientId, clientSecret, scope: 'capgate' });
const transport = new StreamableHTTPClientTransport(new URL(url), { authProvider: provider });
const client = new Client({ name: 'capgate-oauth-check', version: '1.0.0' });
await client.connect(transport);
const { tools } = await client.listTools();
await client.close();

const tokens = provider.tokens();
if (!tokens || !tokens.access_token) throw new Error('the SDK obtained no token');
const payload = JSON.parse(Buffer.from(tokens.access_token.split('.')[1], 'base64url').toString());
const metadata = await discoverOAuthProtectedResourceMetadata(url);
console.log(JSON.stringify({
  authorizationServers: metadata.authorization_servers,
  tokenAudience: payload.aud,
  tools: tools.map((t) => t.name).sort(),
}));
