// A real OpenID Provider for capgate's integration tests: npm `oidc-provider` (a certified
// OpenID Connect implementation, pinned in package.json) on loopback, with test-control
// routes beside it. Started and driven by host/testkit/src/oidc.rs (`OidcProvider`).
//
//   node tests/oidc/provider.mjs CONFIG.json
//
// Listens on 127.0.0.1 on a free port, then prints exactly one line to stdout when ready:
//   {"issuer":"http://127.0.0.1:PORT"}
// Everything else (oidc-provider's warnings, request errors) goes to stderr. Exits when
// stdin closes (the test process died or dropped its handle) or on SIGTERM / SIGINT.
//
// CONFIG.json (every member optional except `clients`):
//   clients       oidc-provider client metadata, as is: client_id, client_secret,
//                 redirect_uris, grant_types, response_types, token_endpoint_auth_method...
//                 (id_token_signed_response_alg defaults to the first of `algs`).
//   accounts      { "<login>": { ...claims } }. The login form accepts any password for a
//                 listed login (an unlisted login gets the form again). `sub` is the login;
//                 every other claim (nested objects, arrays, custom names) goes into the ID
//                 token (scope `openid` already; scope `capgate` carries the same claims),
//                 the userinfo response, and JWT access tokens issued for the account.
//   clientClaims  { "<client_id>": { ...claims } } merged into the JWT access tokens the
//                 client_credentials grant issues to that client.
//   resources     { "<resource indicator URL>": { "scope": "a b", "alg": "ES256" } }: access
//                 tokens for the resource (RFC 8707 `resource=`; the client_credentials
//                 grant, or the authorization code flow with `resource` on /auth) are JWTs
//                 (`typ: at+jwt`) with `aud` = the URL, signed with `alg` (default: the first
//                 of `algs`). Only scopes listed in `scope` make it into such a token.
//   ttl           { "AccessToken": s, "ClientCredentials": s, "IdToken": s } (default 3600).
//   algs          signing keys generated at start, one per entry: "RS256", "PS256",
//                 "ES256", "EdDSA" (Ed25519; "Ed25519" is accepted as a synonym).
//                 Default ["RS256"]. Each key has a unique `kid` and its `alg` in the JWKS.
//   registration  true: enable dynamic client registration (POST /reg, open).
//
// Provider endpoints (oidc-provider's defaults; discovery has them all):
//   GET  /.well-known/openid-configuration
//   GET  /jwks            GET /auth           POST /token        GET /me (userinfo)
//   GET  /session/end     POST /request (PAR) POST /reg (when `registration`)
// Authorization code flow: PKCE S256 is required for every client; consent is automatic
// (a grant for every requested scope, claim and resource), so a browser only signs in.
// JWT access tokens are only issued for a resource indicator; without `resource` the
// access token is opaque (usable at /me only).
//
// The devInteractions login page: GET /auth redirects (303) to
// http://127.0.0.1:PORT/interaction/<uid>, an HTML page titled "Sign-in":
//   <div class="login-card"><h1>Sign-in</h1>
//   <form autocomplete="off" action="http://127.0.0.1:PORT/interaction/<uid>" method="post">
//     <input type="hidden" name="prompt" value="login"/>
//     <input required type="text" name="login" placeholder="Enter any login" autofocus="on">
//     <input required type="password" name="password" placeholder="and password">
//     <button type="submit" class="login login-submit">Sign-in</button>
//   </form>
//   <div class="login-help"><a href=".../interaction/<uid>/abort">[ Cancel ]</a></div>
// Selectors: input[name=login], input[name=password], button.login-submit (or
// button[type=submit]). The form POSTs to the same /interaction/<uid>; a listed login
// (any non-empty password) answers 303 -> /auth/<uid> -> 303 -> the client's redirect_uri
// with ?code=...&state=...&iss=...; an unlisted login answers 303 back to the form. Cookies
// (_interaction, _interaction_resume, _session and their .sig) are plain-http, HttpOnly,
// SameSite=Lax. A second /auth in the same browser session skips the form (SSO). The
// page's Google Fonts @import is stripped: nothing leaves 127.0.0.1.
//
// Test-control routes (answered before oidc-provider sees the request):
//   POST /test/rotate  {"alg":"RS256","keepOld":true} -> {"kid":"..."}
//        a new key of that alg becomes the one used for signing from now on; keepOld
//        false drops the older keys of that alg (keys of other algs stay). Sessions,
//        grants and codes survive (a new Provider over the same in-memory storage).
//   POST /test/mint    {"claims":{...},"alg":"ES256","kid":"optional override"}
//        -> {"token":"..."}: exactly `claims`, signed with the current key of that alg,
//        header {alg, typ: "JWT", kid: the key's kid or the override}; 400 if no key.
//   GET  /test/stats   -> {"jwksRequests":N,"discoveryRequests":M}: GETs of /jwks and of
//        /.well-known/openid-configuration since start, except those carrying the header
//        `x-oidc-harness-uncounted` (the Rust driver's own look-ups).

import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as http from 'node:http';

// oidc-provider prints some notices with console.info: keep stdout for the ready line.
console.log = console.error;
console.info = console.error;

const { default: Provider, errors, interactionPolicy } = await import('oidc-provider');
// oidc-provider's own in-memory adapter, one store for every Provider instance (a rotation
// builds a new one): sessions, interactions, grants and codes survive it. A deep import,
// fine with the exact version pin (the package has no `exports` map).
const { createMemoryAdapter } = await import('oidc-provider/lib/adapters/memory_adapter.js');
const adapter = createMemoryAdapter(15);

const configPath = process.argv[2];
if (!configPath) {
  console.error('usage: node tests/oidc/provider.mjs CONFIG.json');
  process.exit(2);
}
const config = JSON.parse(fs.readFileSync(configPath, 'utf8'));
const accounts = config.accounts ?? {};
const clientClaims = config.clientClaims ?? {};
const resources = config.resources ?? {};
const ttl = config.ttl ?? {};

// ---- signing keys ----------------------------------------------------------------------

const ALGS = new Set(['RS256', 'PS256', 'ES256', 'EdDSA']);
let keySerial = 0;

/** The alg name used throughout: "Ed25519" is spelled "EdDSA". */
const normalizeAlg = (alg) => (alg === 'Ed25519' ? 'EdDSA' : alg);

/** A fresh signing key: { kid, alg, jwk (private, with kid/alg/use), keyObject }. */
function generateKey(requested) {
  const alg = normalizeAlg(requested);
  if (!ALGS.has(alg)) {
    throw new Error(`unsupported alg ${alg} (one of ${[...ALGS].join(', ')})`);
  }
  let pair;
  if (alg === 'RS256' || alg === 'PS256') {
    pair = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 });
  } else if (alg === 'ES256') {
    pair = crypto.generateKeyPairSync('ec', { namedCurve: 'P-256' });
  } else {
    pair = crypto.generateKeyPairSync('ed25519');
  }
  keySerial += 1;
  const kid = `${alg.toLowerCase()}-${keySerial}-${crypto.randomBytes(4).toString('hex')}`;
  const jwk = { ...pair.privateKey.export({ format: 'jwk' }), kid, alg, use: 'sig' };
  return { kid, alg, jwk, keyObject: pair.privateKey };
}

const algs = config.algs ?? ['RS256'];
if (!Array.isArray(algs) || algs.length === 0) {
  throw new Error('config.algs must be a non-empty array');
}
const defaultAlg = normalizeAlg(algs[0]);
// The signing keys, newest first: oidc-provider signs with the first key of an alg.
let keys = algs.map(generateKey);

/** A compact JWS of `payload` with `key`, header {alg, typ: JWT, kid}. */
function signJwt(payload, key, kid) {
  const b64 = (v) => Buffer.from(JSON.stringify(v)).toString('base64url');
  const input = `${b64({ alg: key.alg, typ: 'JWT', kid })}.${b64(payload)}`;
  let signature;
  switch (key.alg) {
    case 'RS256':
      signature = crypto.sign('sha256', Buffer.from(input), key.keyObject);
      break;
    case 'PS256':
      signature = crypto.sign('sha256', Buffer.from(input), {
        key: key.keyObject,
        padding: crypto.constants.RSA_PKCS1_PSS_PADDING,
        saltLength: 32,
      });
      break;
    case 'ES256':
      signature = crypto.sign('sha256', Buffer.from(input), {
        key: key.keyObject,
        dsaEncoding: 'ieee-p1363',
      });
      break;
    default:
      signature = crypto.sign(null, Buffer.from(input), key.keyObject);
  }
  return `${input}.${signature.toString('base64url')}`;
}

// ---- the provider ------------------------------------------------------------------------

// Claims the account's own claims may not replace in an ID token.
const RESERVED = new Set([
  'sub', 'iss', 'aud', 'exp', 'iat', 'nbf', 'jti', 'nonce', 'azp', 'sid', 'auth_time',
  'acr', 'amr', 'at_hash', 'c_hash', 's_hash', 'scope', 'client_id', 'cnf',
]);
const accountClaimNames = [...new Set(
  Object.values(accounts).flatMap((claims) => Object.keys(claims ?? {})),
)].filter((name) => !RESERVED.has(name));

function stripReserved(claims) {
  return Object.fromEntries(
    Object.entries(claims ?? {}).filter(([name]) => !RESERVED.has(name)),
  );
}

// Same across Provider instances, so cookies signed before a rotation stay valid.
const cookieKeys = [crypto.randomBytes(32).toString('base64url')];

function ttlOf(name) {
  const value = ttl[name];
  return Number.isSafeInteger(value) && value > 0 ? value : 3600;
}

/** oidc-provider's prompts, where a login not in `accounts` gets the login form again. */
function loginPolicy() {
  const policy = interactionPolicy.base();
  policy.get('login').checks.add(new interactionPolicy.Check(
    'unknown_account',
    'the login is not one of the configured accounts',
    (ctx) => Boolean(ctx.oidc.session.accountId && !ctx.oidc.account),
  ));
  return policy;
}

function buildProvider(issuer) {
  const configuration = {
    adapter,
    clients: structuredClone(config.clients ?? []),
    clientDefaults: {
      grant_types: ['authorization_code'],
      response_types: ['code'],
      token_endpoint_auth_method: 'client_secret_basic',
      id_token_signed_response_alg: defaultAlg,
    },
    jwks: { keys: keys.map((key) => structuredClone(key.jwk)) },
    cookies: {
      keys: cookieKeys,
      long: { httpOnly: true, sameSite: 'lax' },
      short: { httpOnly: true, sameSite: 'lax' },
    },
    scopes: ['openid', 'offline_access', 'capgate'],
    claims: {
      acr: null,
      sid: null,
      auth_time: null,
      iss: null,
      openid: ['sub', ...accountClaimNames],
      capgate: accountClaimNames,
    },
    // Every claim of the granted scopes in the ID token, not only in userinfo.
    conformIdTokenClaims: false,
    async findAccount(_ctx, sub) {
      if (!Object.hasOwn(accounts, sub)) {
        return undefined;
      }
      return {
        accountId: sub,
        async claims() {
          return { ...stripReserved(accounts[sub]), sub };
        },
      };
    },
    // Automatic consent: the grant always covers what the request asks for.
    async loadExistingGrant(ctx) {
      const { oidc } = ctx;
      const grantId = oidc.result?.consent?.grantId || oidc.session.grantIdFor(oidc.client.clientId);
      let grant = grantId ? await oidc.provider.Grant.find(grantId) : undefined;
      grant ||= new oidc.provider.Grant({
        accountId: oidc.session.accountId,
        clientId: oidc.client.clientId,
      });
      grant.addOIDCScope([...oidc.requestParamOIDCScopes].join(' '));
      grant.addOIDCClaims([...oidc.requestParamClaims]);
      const requested = [...oidc.requestParamScopes];
      for (const [indicator, server] of Object.entries(oidc.resourceServers ?? {})) {
        const scope = requested.filter((s) => server.scopes.has(s)).join(' ');
        if (scope) {
          grant.addResourceScope(indicator, scope);
        }
      }
      await grant.save();
      return grant;
    },
    async extraTokenClaims(_ctx, token) {
      if (token.kind === 'ClientCredentials') {
        return structuredClone(clientClaims[token.clientId] ?? undefined);
      }
      if (token.accountId && Object.hasOwn(accounts, token.accountId)) {
        return stripReserved(accounts[token.accountId]);
      }
      return undefined;
    },
    interactions: { policy: loginPolicy() },
    pkce: { required: () => true },
    clientBasedCORS: () => true,
    async renderError(ctx, out) {
      ctx.type = 'json';
      ctx.body = out;
    },
    ttl: {
      AccessToken: ttlOf('AccessToken'),
      ClientCredentials: ttlOf('ClientCredentials'),
      IdToken: ttlOf('IdToken'),
      Grant: 14 * 24 * 3600,
      Session: 14 * 24 * 3600,
      Interaction: 3600,
      RefreshToken: 14 * 24 * 3600,
    },
    features: {
      devInteractions: { enabled: true },
      clientCredentials: { enabled: true },
      introspection: { enabled: true },
      revocation: { enabled: true },
      registration: { enabled: config.registration === true },
      resourceIndicators: {
        enabled: true,
        // A code granted for a resource redeems to a token for it without `resource=`.
        useGrantedResource: async () => true,
        async getResourceServerInfo(_ctx, indicator) {
          if (!Object.hasOwn(resources, indicator)) {
            throw new errors.InvalidTarget(`unknown resource indicator ${indicator}`);
          }
          const resource = resources[indicator] ?? {};
          return {
            scope: resource.scope ?? '',
            audience: indicator,
            accessTokenFormat: 'jwt',
            accessTokenTTL: ttlOf('AccessToken'),
            jwt: { sign: { alg: normalizeAlg(resource.alg ?? defaultAlg) } },
          };
        },
      },
    },
  };
  const provider = new Provider(issuer, configuration);
  // The devInteractions page imports Google Fonts: keep the browser on loopback.
  provider.use(async (ctx, next) => {
    await next();
    if (typeof ctx.body === 'string' && ctx.body.includes('fonts.googleapis.com')) {
      ctx.body = ctx.body.replace(/@import url\(https:\/\/fonts\.googleapis\.com[^)]*\);/g, '');
    }
  });
  provider.on('server_error', (_ctx, err) => console.error('oidc-provider server_error:', err));
  return { provider, handle: provider.callback() };
}

// ---- the HTTP server -------------------------------------------------------------------

const stats = { jwksRequests: 0, discoveryRequests: 0 };
let current;

function send(res, status, body) {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'cache-control': 'no-store' });
  res.end(text);
}

async function readText(req) {
  const chunks = [];
  let size = 0;
  for await (const chunk of req) {
    size += chunk.length;
    if (size > 64 * 1024) {
      throw new Error('request body too large');
    }
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString('utf8');
}

async function readJson(req) {
  const text = await readText(req);
  return text ? JSON.parse(text) : {};
}

async function testRoute(req, res, path, issuer) {
  if (req.method === 'GET' && path === '/test/stats') {
    return send(res, 200, stats);
  }
  if (req.method !== 'POST' || (path !== '/test/rotate' && path !== '/test/mint')) {
    return send(res, 404, { error: `no test route ${req.method} ${path}` });
  }
  let body;
  try {
    body = await readJson(req);
  } catch (err) {
    return send(res, 400, { error: `invalid JSON: ${err.message}` });
  }
  const alg = normalizeAlg(body.alg ?? defaultAlg);
  if (path === '/test/rotate') {
    let key;
    try {
      key = generateKey(alg);
    } catch (err) {
      return send(res, 400, { error: err.message });
    }
    const others = body.keepOld === false ? keys.filter((k) => k.alg !== alg) : keys;
    keys = [key, ...others];
    current = buildProvider(issuer);
    console.error(`oidc-harness: rotated ${alg}, signing with kid ${key.kid}; keys: ${keys.map((k) => k.kid).join(', ')}`);
    return send(res, 200, { kid: key.kid });
  }
  // /test/mint
  const key = keys.find((k) => k.alg === alg);
  if (!key) {
    return send(res, 400, { error: `no signing key of alg ${alg}` });
  }
  if (body.claims === null || typeof body.claims !== 'object' || Array.isArray(body.claims)) {
    return send(res, 400, { error: 'claims must be a JSON object' });
  }
  const kid = typeof body.kid === 'string' ? body.kid : key.kid;
  return send(res, 200, { token: signJwt(body.claims, key, kid) });
}

const server = http.createServer((req, res) => {
  const path = new URL(req.url ?? '/', 'http://127.0.0.1').pathname;
  if (path.startsWith('/test/')) {
    testRoute(req, res, path, current.provider.issuer).catch((err) => {
      console.error('oidc-harness: test route failed:', err);
      if (!res.headersSent) {
        send(res, 500, { error: String(err?.message ?? err) });
      }
    });
    return;
  }
  if (req.method === 'POST' && /^\/interaction\/[^/]+$/.test(path)) {
    // The login form: a login that is not a configured account gets the form again
    // (before oidc-provider puts it in the session); the body read here is handed on as
    // `req.body`, which oidc-provider's body parser takes when the stream is consumed.
    readText(req).then((text) => {
      const form = new URLSearchParams(text);
      if (form.get('prompt') === 'login' && !Object.hasOwn(accounts, form.get('login') ?? '')) {
        console.error(`oidc-harness: unknown login ${JSON.stringify(form.get('login'))}, showing the form again`);
        res.writeHead(303, { location: path });
        res.end();
        return;
      }
      req.body = text;
      current.handle(req, res);
    }).catch((err) => {
      console.error('oidc-harness: reading the login form failed:', err);
      send(res, 400, { error: 'unreadable form' });
    });
    return;
  }
  // The Rust driver's own look-ups carry x-oidc-harness-uncounted and are not counted.
  const counted = req.method === 'GET' && !req.headers['x-oidc-harness-uncounted'];
  if (counted && path === '/jwks') {
    stats.jwksRequests += 1;
  }
  if (counted && path === '/.well-known/openid-configuration') {
    stats.discoveryRequests += 1;
  }
  current.handle(req, res);
});

server.listen(0, '127.0.0.1', () => {
  const { port } = server.address();
  const issuer = `http://127.0.0.1:${port}`;
  current = buildProvider(issuer);
  process.stdout.write(`${JSON.stringify({ issuer })}\n`);
});

function shutdown() {
  server.close();
  server.closeAllConnections?.();
  process.exit(0);
}
process.on('SIGTERM', shutdown);
process.on('SIGINT', shutdown);
process.stdin.on('end', shutdown);
process.stdin.on('close', shutdown);
process.stdin.on('error', shutdown);
process.stdin.resume();
