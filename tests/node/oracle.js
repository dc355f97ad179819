// Independent oracles: the providers' own Node.js packages sign and verify webhook deliveries.
// Used by tests/unit/providers/test_node_oracles.py, never by the sidecar itself.
//
// Reads one JSON request on stdin and prints one JSON answer on stdout:
//   {"provider": "shopify"|"workos"|"linear"|"standardwebhooks", "action": "sign"|"verify",
//    "secret": "...", "body_b64": "...", "headers": {...}, "timestamp_ms": 123}
// sign   -> {"headers": {...}}            (the headers the provider would send)
// verify -> {"valid": true|false, "detail": "..."}
'use strict';

const PROVIDERS = {
  shopify: {
    // The package's own HMAC helper (what its test suite signs webhooks with).
    async sign({ secret, body }) {
      const { getHmac } = require('@shopify/shopify-api/test-helpers');
      return { 'shopify-hmac-sha256': getHmac(body.toString('utf8'), secret) };
    },
    // shopify.webhooks.validate: detects the Events type by its unprefixed headers.
    async verify({ secret, body, headers }) {
      require('@shopify/shopify-api/adapters/web-api');
      const { shopifyApi, ApiVersion, LogSeverity } = require('@shopify/shopify-api');
      const shopify = shopifyApi({
        apiKey: 'oracle-key',
        apiSecretKey: secret,
        apiVersion: ApiVersion.January26,
        hostName: 'hooks.example.com',
        isEmbeddedApp: false,
        logger: { level: LogSeverity.Error, log: async () => {} },
      });
      const rawRequest = new Request('https://hooks.example.com/webhooks/shopify', {
        method: 'POST', headers, body,
      });
      const result = await shopify.webhooks.validate({ rawBody: body.toString('utf8'), rawRequest });
      return { valid: result.valid === true, detail: result.valid ? result.webhookType : result.reason };
    },
  },
  workos: {
    // The SDK computes the v1 signature; its verifier splits the header on "," (the space
    // WorkOS writes after it is optional), so the header is written without one.
    async sign({ secret, body, timestampMs }) {
      const workos = newWorkOS();
      const signature = await workos.webhooks.computeSignature(timestampMs, JSON.parse(body), secret);
      return { 'WorkOS-Signature': `t=${timestampMs},v1=${signature}` };
    },
    async verify({ secret, body, headers }) {
      const workos = newWorkOS();
      const sigHeader = headers['WorkOS-Signature'] ?? headers['workos-signature'];
      try {
        await workos.webhooks.constructEvent({ payload: JSON.parse(body), sigHeader, secret });
        return { valid: true, detail: '' };
      } catch (error) {
        return { valid: false, detail: String(error && error.message) };
      }
    },
  },
  // @linear/sdk's LinearWebhookClient.verify: HMAC-SHA256 hex of the body, and the body's
  // webhookTimestamp (a number, ms) within 60 s of now.
  linear: {
    async verify({ secret, body, headers }) {
      const { LinearWebhookClient } = await import('@linear/sdk/webhooks');
      const signature = headers['Linear-Signature'] ?? headers['linear-signature'] ?? '';
      try {
        new LinearWebhookClient(secret).verify(body, signature);
        return { valid: true, detail: '' };
      } catch (error) {
        return { valid: false, detail: String(error && error.message) };
      }
    },
  },
  // The proxy's own forward signature, checked by the npm Standard Webhooks library (what an
  // app would use): verify(payload, headers) with its 5-minute timestamp tolerance.
  standardwebhooks: {
    async verify({ secret, body, headers }) {
      const { Webhook } = require('standardwebhooks');
      try {
        new Webhook(secret).verify(body.toString('utf8'), headers);
        return { valid: true, detail: '' };
      } catch (error) {
        return { valid: false, detail: String(error && error.message) };
      }
    },
  },
};

function newWorkOS() {
  const { WorkOS } = require('@workos-inc/node');
  return new WorkOS('sk_test_oracle');
}

async function main() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  const request = JSON.parse(Buffer.concat(chunks).toString('utf8'));
  const provider = PROVIDERS[request.provider];
  if (!provider || !provider[request.action]) {
    throw new Error(`unknown provider/action ${request.provider}/${request.action}`);
  }
  const answer = await provider[request.action]({
    secret: request.secret,
    body: Buffer.from(request.body_b64, 'base64'),
    headers: request.headers || {},
    timestampMs: request.timestamp_ms,
  });
  process.stdout.write(JSON.stringify(request.action === 'sign' ? { headers: answer } : answer));
}

main().catch((error) => {
  process.stderr.write(String(error && error.stack || error));
  process.exit(2);
});
