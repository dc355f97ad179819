"""Providers end to end through a running proxy: batches regrouped on retry, handshakes, and
`webhook-sidecar send` against the proxy."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from datetime import UTC, datetime
from pathlib import Path

import nacl.signing
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.acceptance.conftest import Deployment, run_cli
from tests.support import post, stripe_event, write_config

# SendGrid signs with a private key we hold here; the proxy is configured with its public key.
SENDGRID_KEY = ec.generate_private_key(ec.SECP256R1())
SENDGRID_PUBLIC = base64.b64encode(SENDGRID_KEY.public_key().public_bytes(
    serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)).decode()
DISCORD_KEY = nacl.signing.SigningKey.generate()
ZOOM_SECRET = "zoom-secret-token"
TWITCH_SECRET = "twitch-secret-0123456789"


def add_providers(dep: Deployment) -> None:
    providers = dep.config["providers"]
    providers["sendgrid"] = {"path": "/webhooks/sendgrid", "preset": "sendgrid",
                             "secrets": [SENDGRID_PUBLIC], "lease": "4s", "inflight_wait": "1s"}
    providers["zoom"] = {"path": "/webhooks/zoom", "preset": "zoom", "secrets": [ZOOM_SECRET],
                         "lease": "4s"}
    providers["twitch"] = {"path": "/webhooks/twitch", "preset": "twitch",
                           "secrets": [TWITCH_SECRET], "lease": "4s"}
    providers["discord"] = {"path": "/webhooks/discord", "preset": "discord",
                            "secrets": [DISCORD_KEY.verify_key.encode().hex()], "lease": "4s"}


def sendgrid_delivery(event_ids: list[str]) -> tuple[bytes, dict[str, str]]:
    events = [{"email": "a@example.com", "event": "delivered", "sg_event_id": e,
               "timestamp": 1600112492} for e in event_ids]
    body = (json.dumps(events) + "\r\n").encode()
    timestamp = str(int(time.time()))
    signature = SENDGRID_KEY.sign(timestamp.encode() + body, ec.ECDSA(hashes.SHA256()))
    return body, {"X-Twilio-Email-Event-Webhook-Signature": base64.b64encode(signature).decode(),
                  "X-Twilio-Email-Event-Webhook-Timestamp": timestamp,
                  "Content-Type": "application/json"}


def applied(dep: Deployment) -> list[str]:
    """Every sg_event_id the app has received, across all requests."""
    return [e["sg_event_id"] for seen in dep.stub.seen for e in json.loads(seen.body)]


async def test_regrouped_batch_never_applies_an_event_twice(deployment: Deployment) -> None:
    add_providers(deployment)
    await deployment.start()
    assert deployment.client is not None
    url = deployment.url(0, "/webhooks/sendgrid")

    body, headers = sendgrid_delivery(["sg_1", "sg_2"])
    status, _, _ = await post(deployment.client, url, body, headers)
    assert status == 200
    assert deployment.stub.seen[0].body == body  # a wholly new batch goes byte for byte
    assert deployment.stub.seen[0].headers["X-Webhook-Sidecar-Batch-Size"] == "2"

    # The provider retries with its events regrouped: only the unseen one reaches the app.
    body, headers = sendgrid_delivery(["sg_2", "sg_3"])
    status, _, _ = await post(deployment.client, deployment.url(1, "/webhooks/sendgrid"), body,
                              headers)
    assert status == 200
    assert [e["sg_event_id"] for e in json.loads(deployment.stub.seen[1].body)] == ["sg_3"]

    # Everything already done: answered from the rows, the app is not contacted.
    body, headers = sendgrid_delivery(["sg_3", "sg_1", "sg_1"])
    status, response_headers, _ = await post(deployment.client, url, body, headers)
    assert status == 200 and response_headers["X-Webhook-Sidecar-Replay"] == "true"

    assert sorted(applied(deployment)) == ["sg_1", "sg_2", "sg_3"]  # each exactly once
    rows = await deployment.rows.all()
    assert {(r["provider"], r["event_id"], r["state"]) for r in rows} == {
        ("sendgrid", e, "done") for e in ("sg_1", "sg_2", "sg_3")}


async def test_batch_with_a_failed_app_is_retried_item_by_item(deployment: Deployment) -> None:
    from aiohttp import web

    from tests.support import Seen

    async def fail_once(seen: Seen) -> web.StreamResponse:
        return web.json_response({}, status=500 if len(deployment.stub.seen) == 1 else 200)

    deployment.stub.behaviour = fail_once
    add_providers(deployment)
    await deployment.start()
    assert deployment.client is not None
    url = deployment.url(0, "/webhooks/sendgrid")
    body, headers = sendgrid_delivery(["sg_a", "sg_b"])
    assert (await post(deployment.client, url, body, headers))[0] == 500
    body, headers = sendgrid_delivery(["sg_b", "sg_a"])
    status, response_headers, _ = await post(deployment.client, url, body, headers)
    assert status == 200 and response_headers["X-Webhook-Sidecar-Attempt"] == "2"
    assert applied(deployment) == ["sg_a", "sg_b", "sg_b", "sg_a"]  # failed once, then once


async def test_handshakes_are_answered_by_the_proxy(deployment: Deployment) -> None:
    add_providers(deployment)
    await deployment.start()
    client = deployment.client
    assert client is not None

    # Zoom: endpoint.url_validation → plainToken and its HMAC-SHA256 (hex) under the secret.
    body = json.dumps({"event": "endpoint.url_validation", "event_ts": 1,
                       "payload": {"plainToken": "qgg8vlvZRS6UYooatFL8Aw"}}).encode()
    ts = str(int(time.time()))
    sig = "v0=" + hmac.new(ZOOM_SECRET.encode(), f"v0:{ts}:".encode() + body,
                           hashlib.sha256).hexdigest()
    status, _, payload = await post(client, deployment.url(0, "/webhooks/zoom"), body,
                                    {"x-zm-signature": sig, "x-zm-request-timestamp": ts})
    assert status == 200
    assert json.loads(payload) == {
        "plainToken": "qgg8vlvZRS6UYooatFL8Aw",
        "encryptedToken": hmac.new(ZOOM_SECRET.encode(), b"qgg8vlvZRS6UYooatFL8Aw",
                                   hashlib.sha256).hexdigest()}

    # Twitch: webhook_callback_verification → the raw challenge as text/plain.
    body = json.dumps({"challenge": "pogchamp-kappa-360noscope-vohiyo",
                       "subscription": {"type": "channel.follow"}}).encode()
    message_id = "e76c6bd4-55c9-4987-8304-da1588d8988b"
    ts = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    sig = "sha256=" + hmac.new(TWITCH_SECRET.encode(), message_id.encode() + ts.encode() + body,
                               hashlib.sha256).hexdigest()
    status, headers, payload = await post(client, deployment.url(0, "/webhooks/twitch"), body, {
        "Twitch-Eventsub-Message-Id": message_id, "Twitch-Eventsub-Message-Timestamp": ts,
        "Twitch-Eventsub-Message-Signature": sig,
        "Twitch-Eventsub-Message-Type": "webhook_callback_verification"})
    assert status == 200 and payload == b"pogchamp-kappa-360noscope-vohiyo"
    assert headers["Content-Type"].startswith("text/plain")

    # Discord: PING (type 1) → {"type": 1}; signed with Ed25519 by PyNaCl.
    body = json.dumps({"id": "1", "type": 1}).encode()
    ts = str(int(time.time()))
    signature = DISCORD_KEY.sign(ts.encode() + body).signature.hex()
    status, _, payload = await post(client, deployment.url(0, "/webhooks/discord"), body,
                                    {"X-Signature-Ed25519": signature,
                                     "X-Signature-Timestamp": ts})
    assert status == 200 and json.loads(payload) == {"type": 1}
    bad = ("0" if signature[0] != "0" else "1") + signature[1:]
    status, _, _ = await post(client, deployment.url(0, "/webhooks/discord"), body,
                              {"X-Signature-Ed25519": bad, "X-Signature-Timestamp": ts})
    assert status == 401  # Discord removes endpoints that accept bad signatures

    assert deployment.stub.count() == 0
    assert await deployment.rows.all() == []


async def test_send_many_at_once_reaches_the_app_once(deployment: Deployment,
                                                      tmp_path: Path) -> None:
    await deployment.start()
    payload = tmp_path / "event.json"
    payload.write_bytes(stripe_event("evt_sent"))
    config_path = write_config(tmp_path, deployment.config, "send-config.yaml")
    code, out, err = await run_cli(
        "send", "--config", str(config_path), "--provider", "stripe",
        "--url", deployment.url(0, "/webhooks/stripe"), "--file", str(payload),
        "--count", "20", "--concurrent")
    assert code == 0, out + err
    assert deployment.stub.count("evt_sent") == 1
    assert out.count("200") >= 20


MAILGUN_KEY = "key-mailgun-signing-0123456789"


def mailgun_delivery(event_id: str, token: str, timestamp: int | None = None,
                     signature: dict[str, str] | None = None) -> bytes:
    ts = str(timestamp or int(time.time()))
    sig = signature or {"timestamp": ts, "token": token, "signature": hmac.new(
        MAILGUN_KEY.encode(), (ts + token).encode(), hashlib.sha256).hexdigest()}
    return json.dumps({"signature": sig,
                       "event-data": {"id": event_id, "event": "delivered"}}).encode()


async def test_mailgun_signature_cannot_be_reused_for_another_body(
    deployment: Deployment,
) -> None:
    deployment.config["providers"]["mailgun"] = {
        "path": "/webhooks/mailgun", "preset": "mailgun", "secrets": [MAILGUN_KEY],
        "lease": "4s", "inflight_wait": "1s"}
    await deployment.start()
    client = deployment.client
    assert client is not None
    url = deployment.url(0, "/webhooks/mailgun")
    headers = {"Content-Type": "application/json"}
    genuine = mailgun_delivery("mg_1", "tok-genuine")
    assert (await post(client, url, genuine, headers))[0] == 200
    status, replay_headers, _ = await post(client, deployment.url(1, "/webhooks/mailgun"),
                                           genuine, headers)
    assert status == 200 and replay_headers["X-Webhook-Sidecar-Replay"] == "true"

    # Mailgun signs timestamp+token, not the body: the captured block on a forged body.
    forged = mailgun_delivery("mg_forged", "", signature=json.loads(genuine)["signature"])
    status, _, payload = await post(client, url, forged, headers)
    assert status == 401 and json.loads(payload)["reason"] == "replayed_signature"
    assert deployment.stub.count() == 1
    assert {r["event_id"] for r in await deployment.rows.all()} == {"mg_1"}
