"""The behaviour table of DESIGN.md, row by row, against real proxy processes: one on SQLite,
two sharing PostgreSQL (deliveries alternate between them)."""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import hmac
import json
import time

from aiohttp import web

from tests.acceptance.conftest import Deployment
from tests.support import post, stripe_event, stripe_headers

STRIPE = "/webhooks/stripe"


async def deliver(dep: Deployment, i: int, body: bytes, headers: dict[str, str] | None = None,
                  path: str = STRIPE) -> tuple[int, dict[str, str], bytes]:
    assert dep.client is not None
    return await post(dep.client, dep.url(i, path), body,
                      headers if headers is not None else stripe_headers(body))


async def test_first_delivery_forwarded_once_then_replayed(deployment: Deployment) -> None:
    await deployment.start()
    body = stripe_event("evt_first")
    spoofed = {**stripe_headers(body), "Idempotency-Key": "forged",
               "X-Webhook-Sidecar-Replay": "true", "X-Webhook-Sidecar-Event-Id": "evt_forged",
               "X-Webhook-Sidecar-Batch-Size": "7"}
    status, headers, payload = await deliver(deployment, 0, body, spoofed)
    assert status == 200
    assert json.loads(payload)["event"] == "evt_first"
    seen = deployment.stub.seen[0]
    assert seen.body == body  # byte for byte
    assert seen.idempotency_key == "stripe:evt_first"
    assert seen.attempt == 1
    assert seen.headers["X-Webhook-Sidecar-Provider"] == "stripe"
    assert seen.headers["X-Webhook-Sidecar-Event-Id"] == "evt_first"  # never the sender's copy
    assert "X-Webhook-Sidecar-Replay" not in seen.headers
    assert "X-Webhook-Sidecar-Batch-Size" not in seen.headers
    row = await deployment.rows.one("stripe", "evt_first")
    assert row is not None and row["state"] == "done" and row["response_status"] == 200

    # Redeliveries (re-signed with a new timestamp, as Stripe does) replay from the row.
    for i in range(1, 4):
        status, headers, replayed = await deliver(deployment, i, body)
        assert status == 200
        assert headers["X-Webhook-Sidecar-Replay"] == "true"
        assert replayed == payload
    assert deployment.stub.count("evt_first") == 1


async def test_an_app_404_is_not_final_and_the_retry_reaches_the_fixed_app(
    deployment: Deployment,
) -> None:
    async def misdeployed_then_fixed(seen: object) -> web.StreamResponse:
        if seen.attempt == 1:  # type: ignore[attr-defined]
            return web.json_response({"error": "no such route"}, status=404)
        return web.json_response({"ok": True})

    deployment.stub.behaviour = misdeployed_then_fixed
    await deployment.start()
    body = stripe_event("evt_404")
    status, headers, _ = await deliver(deployment, 0, body)
    assert status == 404 and "Retry-After" in headers
    assert (await deployment.rows.one("stripe", "evt_404"))["state"] == "failed"  # type: ignore[index]
    status, headers, _ = await deliver(deployment, 1, body)  # the provider's retry
    assert status == 200 and headers["X-Webhook-Sidecar-Attempt"] == "2"
    assert deployment.stub.count("evt_404") == 2
    assert (await deployment.rows.one("stripe", "evt_404"))["state"] == "done"  # type: ignore[index]


async def test_a_final_status_is_terminal_and_replayed(deployment: Deployment) -> None:
    async def reject(_: object) -> web.StreamResponse:
        return web.json_response({"error": "unknown customer"}, status=422)

    deployment.stub.behaviour = reject
    deployment.config["providers"]["stripe"]["final_statuses"] = [422]
    await deployment.start()
    body = stripe_event("evt_4xx")
    assert (await deliver(deployment, 0, body))[0] == 422
    status, headers, _ = await deliver(deployment, 1, body)
    assert status == 422 and headers["X-Webhook-Sidecar-Replay"] == "true"
    assert deployment.stub.count("evt_4xx") == 1
    assert (await deployment.rows.one("stripe", "evt_4xx"))["state"] == "done"  # type: ignore[index]


async def test_upstream_500_fails_then_retry_forwards_attempt_2(deployment: Deployment) -> None:
    async def flaky(seen: object) -> web.StreamResponse:
        attempt = seen.attempt
        if attempt == 1:
            return web.json_response({"error": "db down"}, status=500)
        return web.json_response({"ok": True})

    deployment.stub.behaviour = flaky
    await deployment.start()
    body = stripe_event("evt_500")
    status, _, _ = await deliver(deployment, 0, body)
    assert status == 500  # the upstream's own failure status: never a 2xx
    row = await deployment.rows.one("stripe", "evt_500")
    assert row is not None and row["state"] == "failed" and row["attempt"] == 1

    status, headers, _ = await deliver(deployment, 1, body)
    assert status == 200
    assert headers["X-Webhook-Sidecar-Attempt"] == "2"
    assert deployment.stub.attempts("evt_500") == [1, 2]
    row = await deployment.rows.one("stripe", "evt_500")
    assert row is not None and row["state"] == "done" and row["attempt"] == 2


async def test_upstream_refused_gives_502_and_failed_row(deployment: Deployment) -> None:
    deployment.config["upstream"]["url"] = "http://127.0.0.1:9"  # discard port: refused
    await deployment.start()
    body = stripe_event("evt_refused")
    status, headers, _ = await deliver(deployment, 0, body)
    assert status == 502 and "Retry-After" in headers
    row = await deployment.rows.one("stripe", "evt_refused")
    assert row is not None and row["state"] == "failed"


async def test_upstream_timeout_gives_504(deployment: Deployment) -> None:
    deployment.stub.hold.clear()  # the app never answers within upstream.timeout (2s)
    await deployment.start()
    body = stripe_event("evt_slow")
    status, _, _ = await deliver(deployment, 0, body)
    assert status == 504
    row = await deployment.rows.one("stripe", "evt_slow")
    assert row is not None and row["state"] == "failed"
    deployment.stub.hold.set()


async def test_inflight_duplicate_gets_409_then_mirrors_outcome(deployment: Deployment) -> None:
    deployment.stub.hold.clear()
    await deployment.start()
    body = stripe_event("evt_inflight")
    first = asyncio.create_task(deliver(deployment, 0, body))
    await deployment.stub.wait_for(lambda: deployment.stub.count("evt_inflight") == 1)

    status, headers, _ = await deliver(deployment, 1, body)  # waits inflight_wait (1s), then 409
    assert status == 409
    assert int(headers["Retry-After"]) >= 1

    waiter = asyncio.create_task(deliver(deployment, 1, body))
    deployment.stub.hold.set()
    assert (await first)[0] == 200
    status, headers, _ = await waiter
    assert status == 200 and headers["X-Webhook-Sidecar-Replay"] == "true"
    assert deployment.stub.count("evt_inflight") == 1


async def test_rejections_write_nothing_and_reach_nothing(deployment: Deployment) -> None:
    await deployment.start()
    body = stripe_event("evt_bad")
    good = stripe_headers(body)

    tampered = body.replace(b"invoice.paid", b"invoice.void")
    assert (await deliver(deployment, 0, tampered, good))[0] == 401
    wrong_secret = stripe_headers(body, secret="whsec_someone_else")
    assert (await deliver(deployment, 0, body, wrong_secret))[0] == 401
    stale = stripe_headers(body, timestamp=int(time.time()) - 3600)
    status, _, payload = await deliver(deployment, 1, body, stale)
    assert status == 401 and json.loads(payload)["reason"] == "stale_timestamp"
    assert (await deliver(deployment, 0, body, {"Content-Type": "application/json"}))[0] == 401

    no_id = json.dumps({"object": "event", "type": "ping"}).encode()
    status, _, payload = await deliver(deployment, 0, no_id)
    assert status == 400 and json.loads(payload)["reason"] == "missing_event_id"

    big = stripe_event("evt_big", filler="x" * (1024 * 1024))
    assert (await deliver(deployment, 1, big))[0] == 413

    status, _, payload = await deliver(deployment, 0, body, path="/webhooks/nobody")
    assert status == 404 and json.loads(payload)["reason"] == "unknown_path"
    assert deployment.client is not None
    async with deployment.client.get(deployment.url(0, STRIPE)) as resp:
        assert resp.status == 405 and (await resp.json())["reason"] == "method_not_allowed"

    gzipped = {**good, "Content-Encoding": "gzip"}
    status, _, payload = await deliver(deployment, 0, gzip.compress(body), gzipped)
    assert status == 415 and json.loads(payload)["reason"] == "content_encoding"

    assert await deployment.rows.all() == []
    assert deployment.stub.count() == 0


async def test_github_published_vector_and_delivery_id(deployment: Deployment) -> None:
    await deployment.start()
    body = b"Hello, World!"
    sig = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    headers = {"X-Hub-Signature-256": sig, "X-GitHub-Delivery": "72d3162e-cc78-11e3"}
    assert (await deliver(deployment, 0, body, headers, "/webhooks/github"))[0] == 200
    status, replay_headers, _ = await deliver(deployment, 1, body, headers, "/webhooks/github")
    assert status == 200 and replay_headers["X-Webhook-Sidecar-Replay"] == "true"
    assert deployment.stub.count("72d3162e-cc78-11e3") == 1


async def test_slack_url_verification_is_answered_by_the_proxy(deployment: Deployment) -> None:
    await deployment.start()
    secret = b"8f742231b10e8888abcd99yyyzzz85a5"
    body = json.dumps({"type": "url_verification", "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3g",
                       "token": "x"}).encode()
    ts = str(int(time.time()))
    sig = "v0=" + hmac.new(secret, f"v0:{ts}:".encode() + body, hashlib.sha256).hexdigest()
    headers = {"X-Slack-Signature": sig, "X-Slack-Request-Timestamp": ts}
    status, _, payload = await deliver(deployment, 0, body, headers, "/webhooks/slack")
    assert status == 200
    assert json.loads(payload) == {"challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3g"}
    assert deployment.stub.count() == 0
    assert await deployment.rows.all() == []


async def test_same_id_different_body_is_a_duplicate(deployment: Deployment) -> None:
    await deployment.start()
    assert (await deliver(deployment, 0, stripe_event("evt_mm", n=1)))[0] == 200
    status, headers, _ = await deliver(deployment, 1, stripe_event("evt_mm", n=2))
    assert status == 200 and headers["X-Webhook-Sidecar-Replay"] == "true"
    assert deployment.stub.count("evt_mm") == 1
    # The second delivery went to procs[1 % n]; its log line may still be in the pipe.
    entry = await deployment.procs[1 % len(deployment.procs)].wait_for_log("payload_mismatch")
    assert entry["event_id"] == "evt_mm"
    logs = [e for p in deployment.procs for e in p.logs if e.get("event") == "payload_mismatch"]
    assert len(logs) == 1


async def test_concurrent_burst_reaches_the_app_once(deployment: Deployment) -> None:
    await deployment.start()
    body = stripe_event("evt_burst")
    results = await asyncio.gather(*(deliver(deployment, i, body) for i in range(50)))
    statuses = [status for status, _, _ in results]
    assert set(statuses) <= {200, 409, 503}, statuses
    assert 200 in statuses
    assert deployment.stub.count("evt_burst") == 1
    rows = await deployment.rows.all()
    assert [(r["event_id"], r["state"], r["attempt"]) for r in rows] == [("evt_burst", "done", 1)]


async def test_a_body_that_never_arrives_gets_408(deployment: Deployment) -> None:
    deployment.config["body_read_timeout"] = "300ms"
    await deployment.start(1)
    host, port = deployment.procs[0].listen.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        # Headers promise 100 bytes; the body never comes (a slow or stalled sender).
        writer.write(b"POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n"
                     b"Content-Type: application/json\r\n\r\n{")
        await writer.drain()
        status_line = await asyncio.wait_for(reader.readline(), 10)
        assert status_line.startswith(b"HTTP/1.1 408")
    finally:
        writer.close()
    assert deployment.stub.count() == 0 and await deployment.rows.all() == []
