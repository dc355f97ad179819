// The Node + Redis competitor of bench/wrk.py: what a team would write in an afternoon
// instead of webhook-sidecar, from the ecosystem's own packages, in one Node process.
//
//   verify   @octokit/webhooks-methods verify() of X-Hub-Signature-256 (401 if it fails)
//   dedupe   @node-idempotency/core on X-GitHub-Delivery, stored in Redis through
//            @node-idempotency/storage-adapter-redis: a SET NX claims the id (IN_PROGRESS);
//            a duplicate GETs the stored response and replays it; a copy arriving while the
//            first is in flight polls Redis (every 10 ms, up to 5 s) for its answer
//   forward  undici Pool to the app, keep-alive; the app's answer is stored (SET) and returned
//
// Environment: PORT (0 = any), UPSTREAM (http://127.0.0.1:PORT), REDIS_URL
// (redis://127.0.0.1:PORT/DB), SECRET. Prints {"event":"listening","listen":"HOST:PORT"}.
// Redis durability is whatever the server does (bench/wrk.py starts one with no persistence):
// unlike webhook-sidecar's synchronous PostgreSQL commits, a crash can forget claims.

import http from "node:http";
import { verify } from "@octokit/webhooks-methods";
import { Idempotency, IdempotencyError, IdempotencyErrorCodes } from "@node-idempotency/core";
import { RedisStorageAdapter } from "@node-idempotency/storage-adapter-redis";
import { Pool } from "undici";

const port = Number(process.env.PORT ?? 0);
const upstream = process.env.UPSTREAM ?? "http://127.0.0.1:8081";
const secret = process.env.SECRET ?? "";
const storage = new RedisStorageAdapter({ url: process.env.REDIS_URL ?? "redis://127.0.0.1:6379" });
await storage.connect();
const idempotency = new Idempotency(storage, {
  idempotencyKey: "x-github-delivery",
  enforceIdempotency: true,
  inProgressStrategy: { wait: true, pollingIntervalMs: 10, maxWaitMs: 5000 },
});
const pool = new Pool(upstream, { connections: 100, keepAliveTimeout: 4000 });

const HOP_BY_HOP = new Set(["connection", "keep-alive", "proxy-authenticate",
  "proxy-authorization", "te", "trailer", "transfer-encoding", "upgrade", "host",
  "content-length"]);

function reply(res, status, headers, body) {
  res.writeHead(status, { ...headers, "content-length": Buffer.byteLength(body) });
  res.end(body);
}

async function handle(req, res) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  const body = Buffer.concat(chunks).toString("utf8");
  const signature = req.headers["x-hub-signature-256"];
  if (!signature || !(await verify(secret, body, signature))) {
    return reply(res, 401, { "content-type": "text/plain" }, "bad signature\n");
  }
  const request = { headers: req.headers, body, path: req.url, method: req.method };
  let cached;
  try {
    cached = await idempotency.onRequest(request);
  } catch (error) {
    if (error instanceof IdempotencyError) {
      const status =
        error.code === IdempotencyErrorCodes.IDEMPOTENCY_FINGERPRINT_MISSMATCH ? 422 :
        error.code === IdempotencyErrorCodes.REQUEST_IN_PROGRESS ? 409 : 400;
      return reply(res, status, { "content-type": "text/plain" }, `${error.message}\n`);
    }
    throw error;
  }
  if (cached) {
    const { status, headers } = cached.additional;
    return reply(res, status, { ...headers, "x-replay": "true" }, cached.body);
  }
  const headers = {};
  for (const [name, value] of Object.entries(req.headers)) {
    if (!HOP_BY_HOP.has(name)) headers[name] = value;
  }
  const answer = await pool.request({ path: req.url, method: req.method, headers, body });
  const text = await answer.body.text();
  const kept = { "content-type": answer.headers["content-type"] ?? "text/plain" };
  await idempotency.onResponse(request, {
    body: text, additional: { status: answer.statusCode, headers: kept },
  });
  return reply(res, answer.statusCode, kept, text);
}

const server = http.createServer((req, res) => {
  handle(req, res).catch((error) => {
    if (!res.headersSent) reply(res, 502, { "content-type": "text/plain" }, `${error}\n`);
    else res.destroy();
  });
});
server.keepAliveTimeout = 75_000;
server.listen(port, "127.0.0.1", () => {
  const { address, port: bound } = server.address();
  console.log(JSON.stringify({ event: "listening", listen: `${address}:${bound}` }));
});

async function stop() {
  server.close();
  server.closeAllConnections?.();
  await pool.close().catch(() => {});
  await storage.disconnect();
  process.exit(0);
}
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
