// A real OpenID provider (panva/oidc-provider) for the portal's OIDC login tests.
//
// One static confidential client (client_secret_post, PKCE required, RS256 ID
// tokens), a minimal login page (any login name, any non-empty password), no
// consent screen for that first-party client, and RP-initiated logout.
//
// Accounts: the login name is the subject. Claims default to
// preferred_username = login, email = login@example.test; the JSON file named by
// --accounts-file maps login names to extra or overriding claims (email,
// domain_id, project_id, roles, ...). It is re-read on every lookup, so a test can
// change a subject's claims between two logins.
//
// Configuration: --name=value arguments, else OIDC_* environment variables:
//   --port (OIDC_PORT, default 0: any free port; the ready line names it)
//   --listen (OIDC_LISTEN, default 127.0.0.1)
//   --issuer-host (OIDC_ISSUER_HOST, default localhost: another site than the
//     portal on 127.0.0.1, as a real IdP would be)
//   --client-id, --client-secret (OIDC_CLIENT_ID, OIDC_CLIENT_SECRET)
//   --redirect-uri (OIDC_REDIRECT_URI), --post-logout-redirect-uri
//     (OIDC_POST_LOGOUT_REDIRECT_URI): comma-separated lists
//   --accounts-file (OIDC_ACCOUNTS_FILE), --jwks-file (OIDC_JWKS_FILE: a private
//     JWK set; a fresh RSA key is generated when absent)
//
// Once listening it prints one line on stdout: "oidc-provider ready <issuer>".

import { generateKeyPairSync, randomBytes, randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import http from 'node:http';
import { parseArgs } from 'node:util';

import Provider from 'oidc-provider';

const OPTIONS = {
  port: 'OIDC_PORT',
  listen: 'OIDC_LISTEN',
  'issuer-host': 'OIDC_ISSUER_HOST',
  'client-id': 'OIDC_CLIENT_ID',
  'client-secret': 'OIDC_CLIENT_SECRET',
  'redirect-uri': 'OIDC_REDIRECT_URI',
  'post-logout-redirect-uri': 'OIDC_POST_LOGOUT_REDIRECT_URI',
  'accounts-file': 'OIDC_ACCOUNTS_FILE',
  'jwks-file': 'OIDC_JWKS_FILE',
};

function readConfig() {
  const { values } = parseArgs({
    options: Object.fromEntries(Object.keys(OPTIONS).map((name) => [name, { type: 'string' }])),
  });
  const get = (name, fallback) => values[name] ?? process.env[OPTIONS[name]] ?? fallback;
  const list = (name) => get(name, '').split(',').map((item) => item.trim()).filter(Boolean);
  const config = {
    port: Number(get('port', '0')),
    listen: get('listen', '127.0.0.1'),
    issuerHost: get('issuer-host', 'localhost'),
    clientId: get('client-id'),
    clientSecret: get('client-secret'),
    redirectUris: list('redirect-uri'),
    postLogoutRedirectUris: list('post-logout-redirect-uri'),
    accountsFile: get('accounts-file'),
    jwksFile: get('jwks-file'),
  };
  for (const key of ['clientId', 'clientSecret', 'redirectUris', 'postLogoutRedirectUris']) {
    const value = config[key];
    if (value === undefined || (Array.isArray(value) && !value.length)) {
      throw new Error(`missing configuration: ${key} (see the header of server.js)`);
    }
  }
  return config;
}

function signingKeys(jwksFile) {
  if (jwksFile) {
    return JSON.parse(readFileSync(jwksFile, 'utf8'));
  }
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  return { keys: [{ ...privateKey.export({ format: 'jwk' }), kid: randomUUID(), use: 'sig', alg: 'RS256' }] };
}

function accountClaims(accountsFile, login) {
  const accounts = accountsFile ? JSON.parse(readFileSync(accountsFile, 'utf8')) : {};
  return {
    preferred_username: login,
    email: `${login}@example.test`,
    email_verified: true,
    ...(accounts[login] ?? {}),
    sub: login,
  };
}

const escapeHtml = (value) => String(value).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

// Plain pages with no external resources (the defaults pull a web font, and
// the tests run offline); the empty icon keeps the browser from asking for
// /favicon.ico, whose 404 would be a console error in the tests.
function page(title, body) {
  return `<!DOCTYPE html><html><head><meta charset="utf-8"><link rel="icon" href="data:,">`
    + `<title>${escapeHtml(title)}</title></head>`
    + `<body><main><h1>${escapeHtml(title)}</h1>${body}</main></body></html>`;
}

function providerConfiguration(config) {
  return {
    clients: [{
      client_id: config.clientId,
      client_secret: config.clientSecret,
      redirect_uris: config.redirectUris,
      post_logout_redirect_uris: config.postLogoutRedirectUris,
      response_types: ['code'],
      grant_types: ['authorization_code'],
      token_endpoint_auth_method: 'client_secret_post',
      id_token_signed_response_alg: 'RS256',
    }],
    jwks: signingKeys(config.jwksFile),
    cookies: { keys: [randomBytes(32).toString('hex')] },
    // CCP's Keycloak puts its mapped claims in every token, whatever the scope:
    // here they ride on "openid", which every request carries.
    claims: {
      openid: ['sub', 'domain_id', 'project_id', 'roles'],
      profile: ['preferred_username', 'name', 'given_name', 'family_name'],
      email: ['email', 'email_verified'],
    },
    findAccount: async (_ctx, sub) => ({
      accountId: sub,
      claims: async () => accountClaims(config.accountsFile, sub),
    }),
    pkce: { required: () => true },
    features: {
      devInteractions: { enabled: false },
      rpInitiatedLogout: {
        enabled: true,
        logoutSource: async (ctx, form) => {
          ctx.body = page('Sign out', `${form}<p>Sign out of the identity provider?</p>`
            + '<button type="submit" form="op.logoutForm" name="logout" value="yes">Yes, sign me out</button>');
        },
        postLogoutSuccessSource: async (ctx) => {
          ctx.body = page('Signed out', '<p>You are signed out.</p>');
        },
      },
    },
    interactions: { url: async (_ctx, interaction) => `/interaction/${interaction.uid}` },
    // The only client is first-party: its consent is implied, as with a realm's
    // own portal in Keycloak, so no consent screen is shown.
    loadExistingGrant: async (ctx) => {
      const grantId = ctx.oidc.result?.consent?.grantId || ctx.oidc.session.grantIdFor(ctx.oidc.client.clientId);
      if (grantId) {
        return ctx.oidc.provider.Grant.find(grantId);
      }
      const grant = new ctx.oidc.provider.Grant({
        clientId: ctx.oidc.client.clientId,
        accountId: ctx.oidc.session.accountId,
      });
      grant.addOIDCScope(ctx.oidc.params.scope);
      await grant.save();
      return grant;
    },
    renderError: async (ctx, out) => {
      ctx.type = 'html';
      ctx.body = page('Identity provider error', `<pre>${escapeHtml(JSON.stringify(out, null, 2))}</pre>`);
    },
  };
}

async function readForm(req) {
  let body = '';
  for await (const chunk of req) {
    body += chunk;
  }
  return new URLSearchParams(body);
}

// The login step of an authorization request: GET shows the form, POST signs
// the login name in and hands the request back to the provider.
async function interaction(provider, req, res, uid) {
  const details = await provider.interactionDetails(req, res);
  if (details.uid !== uid || details.prompt.name !== 'login') {
    res.writeHead(400, { 'Content-Type': 'text/plain' }).end(`unexpected interaction prompt: ${details.prompt.name}`);
    return;
  }
  if (req.method === 'POST') {
    const form = await readForm(req);
    const login = form.get('login')?.trim();
    if (login && form.get('password')) {
      await provider.interactionFinished(req, res, { login: { accountId: login } }, { mergeWithLastSubmission: false });
      return;
    }
  }
  res.writeHead(200, { 'Content-Type': 'text/html; charset=utf-8', 'Cache-Control': 'no-store' });
  res.end(page('Sign in to the identity provider', `<form method="post" action="/interaction/${escapeHtml(uid)}">`
    + '<label>Login <input name="login" autocomplete="off" required autofocus></label>'
    + '<label>Password <input name="password" type="password" autocomplete="current-password" required></label>'
    + '<button type="submit">Sign in</button></form>'));
}

function requestHandler(provider) {
  const providerCallback = provider.callback();
  return (req, res) => {
    const match = new URL(req.url, provider.issuer).pathname.match(/^\/interaction\/([\w-]+)$/);
    if (!match) {
      providerCallback(req, res);
      return;
    }
    interaction(provider, req, res, match[1]).catch((error) => {
      console.error(error);
      if (!res.headersSent) {
        res.writeHead(400, { 'Content-Type': 'text/plain' });
      }
      res.end(String(error.message));
    });
  };
}

function logErrors(provider) {
  for (const event of ['server_error', 'authorization.error', 'grant.error', 'userinfo.error', 'end_session.error']) {
    provider.on(event, (_ctx, error) => {
      console.error(`${event}: ${error.message} ${error.error_description ?? ''} ${error.cause ?? ''}`);
    });
  }
}

const config = readConfig();
const server = http.createServer();
server.listen(config.port, config.listen, () => {
  // The issuer names the port actually bound, so port 0 never races.
  const issuer = `http://${config.issuerHost}:${server.address().port}`;
  const provider = new Provider(issuer, providerConfiguration(config));
  logErrors(provider);
  server.on('request', requestHandler(provider));
  console.log(`oidc-provider ready ${issuer}`);
});

for (const signal of ['SIGINT', 'SIGTERM']) {
  process.on(signal, () => process.exit(0));
}
