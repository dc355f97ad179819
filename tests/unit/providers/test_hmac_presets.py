"""Shared-secret presets: each delivery is signed by an independent oracle (the provider's SDK
where it can sign, the published vector, or an HMAC written out here from the provider's
docs), verifies under the preset, and fails when one byte of body, signature, timestamp or
secret changes. Where the SDK can only verify, it must accept what our ``sign`` produces."""

from __future__ import annotations

import base64
import hmac
import json
import time
from datetime import UTC, datetime

import pytest
import razorpay
import resend
import svix.webhooks
from hubspot.utils.signature import Signature as HubSpotSignature
from paddle_billing.Notifications import PaddleSignature, Secret
from square.utils.webhooks_helper import verify_signature as square_verify
from workos.webhooks._verification import verify_header as workos_verify_header

from sidecar.core.errors import ConfigError
from sidecar.core.signing import Delivery, parse_signature_spec, sign, verify

from .helpers import (
    NOW,
    PUBLIC_URL,
    assert_tampering_fails,
    flip,
    keys_for,
    preset_spec,
    reason,
)

BODY = b'{"id":"evt_1","type":"thing.happened","data":{"note":"caf\xc3\xa9 \xe2\x98\x95"}}'
SECRET = "s3cr3t-signing-key_0123456789"
SECRET_2 = "rotated-signing-key_abcdefghij"


def mac(secret: str, message: bytes, digest: str = "sha256") -> bytes:
    return hmac.new(secret.encode(), message, digest).digest()


# --- body-only HMAC presets, signed by hand from each provider's documented recipe -----------

# (preset, signature header, how the provider writes the header from the secret and body)
BODY_SIGNED = [
    ("github", "X-Hub-Signature-256", lambda s, b: "sha256=" + mac(s, b).hex()),
    ("shopify", "X-Shopify-Hmac-Sha256", lambda s, b: base64.b64encode(mac(s, b)).decode()),
    ("intercom", "X-Hub-Signature", lambda s, b: "sha1=" + mac(s, b, "sha1").hex()),
    ("bitbucket", "X-Hub-Signature", lambda s, b: "sha256=" + mac(s, b).hex()),
    ("lemonsqueezy", "X-Signature", lambda s, b: mac(s, b).hex()),
    ("razorpay", "X-Razorpay-Signature", lambda s, b: mac(s, b).hex()),
    ("mollie", "X-Mollie-Signature", lambda s, b: "sha256=" + mac(s, b).hex()),
]


@pytest.mark.parametrize("preset, header, signer", BODY_SIGNED, ids=[c[0] for c in BODY_SIGNED])
def test_body_signed_presets(preset: str, header: str, signer: object) -> None:
    assert callable(signer)
    spec = preset_spec(preset)
    headers = {header: signer(SECRET, BODY)}
    assert_tampering_fails(spec, keys_for(spec, SECRET), keys_for(spec, SECRET_2), BODY, headers,
                           signature_header=header)
    # Rotation: both secrets configured, a delivery signed with either verifies.
    both = keys_for(spec, SECRET_2, SECRET)
    verify(spec, both, Delivery(BODY, headers), NOW)
    verify(spec, both, Delivery(BODY, {header: signer(SECRET_2, BODY)}), NOW)
    # And our signer writes exactly what the provider writes.
    assert sign(spec, SECRET.encode(), Delivery(BODY, {}), NOW) == headers


def test_linear_signs_the_body_and_its_webhook_timestamp() -> None:
    """Linear: HMAC-SHA256 hex of the body, whose webhookTimestamp (ms) is checked like a
    signed timestamp (60 s either way, as @linear/sdk does) once the body is authentic."""
    spec = preset_spec("linear")

    def delivery(**fields: object) -> tuple[bytes, dict[str, str]]:
        body = json.dumps({"action": "create", "type": "Issue", **fields}).encode()
        return body, {"Linear-Signature": mac(SECRET, body).hex()}

    keys, wrong = keys_for(spec, SECRET), keys_for(spec, SECRET_2)
    body, headers = delivery(webhookTimestamp=NOW * 1000)
    assert_tampering_fails(spec, keys, wrong, body, headers, signature_header="Linear-Signature")
    assert sign(spec, SECRET.encode(), Delivery(body, {}), NOW) == headers
    verify(spec, keys, Delivery(*delivery(webhookTimestamp=NOW * 1000 - 59_000)), NOW)
    assert reason(spec, keys, *delivery(webhookTimestamp=NOW * 1000 - 600_000)) == (
        "stale_timestamp")  # a captured body resent ten minutes later
    assert reason(spec, keys, *delivery(webhookTimestamp=NOW * 1000 + 61_000)) == (
        "future_timestamp")
    assert reason(spec, keys, *delivery()) == "missing_timestamp"
    for bad in (str(NOW * 1000), NOW * 1000 + 0.5, True):
        assert reason(spec, keys, *delivery(webhookTimestamp=bad)) == "bad_timestamp"
    # The signature is checked first: a forged stale body says bad_signature, not its age.
    stale, _ = delivery(webhookTimestamp=NOW * 1000 - 600_000)
    assert reason(spec, keys, stale, {"Linear-Signature": "00" * 32}) == "bad_signature"


@pytest.mark.parametrize("timestamp, message, error", [
    ({"json": "$.ts", "header": "X-Ts"}, "{body}", "timestamp.json: give one of header, "
     "from or json"),
    ({"json": "$.ts"}, "{timestamp}.{body}", "message: uses {timestamp}, but the timestamp is "
     "read from the body"),
    ({"json": "ts"}, "{body}", "timestamp.json: must be a JSON path"),
])
def test_a_body_timestamp_is_declared_with_a_json_path(timestamp: dict[str, str], message: str,
                                                       error: str) -> None:
    data = {"algorithm": "hmac-sha256", "header": "X-Sig", "format": {"type": "plain"},
            "encoding": "hex", "message": message, "timestamp": timestamp}
    with pytest.raises(ConfigError) as caught:
        parse_signature_spec(data, "signature")
    assert error in str(caught.value)


def test_github_published_vector() -> None:
    spec = preset_spec("github")
    headers = {"X-Hub-Signature-256":
               "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"}
    keys = keys_for(spec, "It's a Secret to Everybody")
    verify(spec, keys, Delivery(b"Hello, World!", headers), NOW)
    assert reason(spec, keys, b"Hello, World?", headers) == "bad_signature"


def test_mollie_rotation_sends_one_signature_per_secret() -> None:
    spec = preset_spec("mollie")
    joined = f"sha256={mac(SECRET_2, BODY).hex()}, sha256={mac(SECRET, BODY).hex()}"
    verify(spec, keys_for(spec, SECRET), Delivery(BODY, {"X-Mollie-Signature": joined}), NOW)
    assert reason(spec, keys_for(spec, "other"), BODY, {"X-Mollie-Signature": joined}) == (
        "bad_signature"
    )


def test_razorpay_sdk_accepts_our_signature() -> None:
    spec = preset_spec("razorpay")
    [key] = keys_for(spec, SECRET)
    signature = sign(spec, key, Delivery(BODY, {}), NOW)["X-Razorpay-Signature"]
    utility = razorpay.Utility(None)
    assert utility.verify_webhook_signature(BODY.decode(), signature, SECRET)
    with pytest.raises(razorpay.errors.SignatureVerificationError):
        utility.verify_webhook_signature(BODY.decode(), signature, SECRET_2)


# --- GitLab: the shared token itself ---------------------------------------------------------


def test_gitlab_token_compared_as_is() -> None:
    spec = preset_spec("gitlab")
    keys = keys_for(spec, "glpat-like-token", "next-token")
    verify(spec, keys, Delivery(BODY, {"X-Gitlab-Token": "glpat-like-token"}), NOW)
    verify(spec, keys, Delivery(b"anything", {"x-gitlab-token": "next-token"}), NOW)  # rotation
    for wrong in ("glpat-like-toke", "glpat-like-tokenX", "GLPAT-LIKE-TOKEN", "\udcff"):
        assert reason(spec, keys, BODY, {"X-Gitlab-Token": wrong}) == "bad_signature"
    assert reason(spec, keys, BODY, {}) == "missing_signature"
    assert sign(spec, b"glpat-like-token", Delivery(BODY, {}), NOW) == {
        "X-Gitlab-Token": "glpat-like-token"}


# --- Clerk and Resend: the Svix scheme ---------------------------------------------------------

SVIX_SECRET = "whsec_" + base64.b64encode(b"clerk-and-resend-test-key-32byte").decode()
SVIX_SECRET_2 = "whsec_" + base64.b64encode(b"a rotated key for svix senders!!").decode()
MSG_ID = "msg_2Lh9KRb0pzN4LePd3XbGJmRDX3a"


def svix_headers(secret: str, timestamp: int = NOW) -> dict[str, str]:
    when = datetime.fromtimestamp(timestamp, tz=UTC)
    signature = svix.webhooks.Webhook(secret).sign(MSG_ID, when, BODY.decode())
    return {"svix-id": MSG_ID, "svix-timestamp": str(timestamp), "svix-signature": signature}


@pytest.mark.parametrize("preset", ["clerk", "resend"])
def test_svix_senders_signed_by_the_svix_sdk(preset: str) -> None:
    spec = preset_spec(preset)
    headers = svix_headers(SVIX_SECRET)
    assert_tampering_fails(spec, keys_for(spec, SVIX_SECRET), keys_for(spec, SVIX_SECRET_2), BODY,
                           headers, signature_header="svix-signature",
                           timestamp_header="svix-timestamp")
    both = keys_for(spec, SVIX_SECRET, SVIX_SECRET_2)
    verify(spec, both, Delivery(BODY, svix_headers(SVIX_SECRET_2)), NOW)
    changed_id = {**headers, "svix-id": "msg_other"}
    assert reason(spec, both, BODY, changed_id) == "bad_signature"


def test_resend_sdk_accepts_our_signature() -> None:
    spec = preset_spec("resend")
    [key] = keys_for(spec, SVIX_SECRET)
    now = time.time()  # the SDK checks ±5 min against the real clock
    added = sign(spec, key, Delivery(BODY, {"svix-id": MSG_ID}), now)
    options = {"payload": BODY.decode(), "webhook_secret": SVIX_SECRET,
               "headers": {"id": MSG_ID, "timestamp": added["svix-timestamp"],
                           "signature": added["svix-signature"]}}
    assert resend.Webhooks.verify(options)["id"] == "evt_1"  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        resend.Webhooks.verify({**options, "webhook_secret": SVIX_SECRET_2})  # type: ignore[typeddict-item]


# --- Square: URL from config -----------------------------------------------------------------


def test_square_published_vector_with_the_configured_url() -> None:
    spec = preset_spec("square", url="https://example.com/webhook")
    keys = keys_for(spec, "asdf1234")
    headers = {"x-square-hmacsha256-signature": "2kRE5qRU2tR+tBGlDwMEw2avJ7QM4ikPYD/PJ3bd9Og="}
    body = b'{"hello":"world"}'
    assert_tampering_fails(spec, keys, keys_for(spec, "asdf1235"), body, headers,
                           signature_header="x-square-hmacsha256-signature")
    # The URL is part of the signature: the one the request came in on is irrelevant, a
    # different configured URL (even a trailing slash) fails.
    verify(spec, keys, Delivery(body, headers, method="POST", query="ignored=1"), NOW)
    for other in ("https://example.com/webhook/", "http://example.com/webhook"):
        assert reason(preset_spec("square", url=other), keys, body, headers) == "bad_signature"


def test_square_sdk_accepts_our_signature() -> None:
    spec = preset_spec("square")
    [key] = keys_for(spec, "sq-signature-key")
    headers = sign(spec, key, Delivery(BODY, {}), NOW)
    signature = headers["x-square-hmacsha256-signature"]
    assert square_verify(request_body=BODY.decode(), signature_header=signature,
                         signature_key="sq-signature-key", notification_url=PUBLIC_URL)
    assert not square_verify(request_body=BODY.decode(), signature_header=signature,
                             signature_key="sq-signature-key", notification_url=PUBLIC_URL + "/")


def test_url_signed_preset_without_url_is_a_config_error() -> None:
    from sidecar.config.presets import load_preset
    from sidecar.core.errors import ConfigError
    from sidecar.core.signing import parse_signature_spec

    for name in ("square", "hubspot", "twilio"):
        with pytest.raises(ConfigError) as caught:
            parse_signature_spec(load_preset(name)["signature"], f"providers.{name}.signature")
        assert caught.value.path == f"providers.{name}.signature.url"


# --- Paddle: the SDK's own vector and signer -------------------------------------------------

PADDLE_SECRET = "pdl_ntf_01hbpjmytsa32fhr36nqgc3kgb_WvRO0eL4Bj9rgYYIBZY6wZhG4EHy9jzh"


def test_paddle_sdk_vector_with_a_dummy_h1() -> None:
    spec = preset_spec("paddle")
    header = ("ts=1696195954;h1=dummy;"
              "h1=d96299976a6eb066f484d7fde011ac56fc32b38fc9940bc419d6e537fdc6ef02")
    keys = keys_for(spec, PADDLE_SECRET)
    verify(spec, keys, Delivery(b"hello-world", {"Paddle-Signature": header}), 1696195954 + 29)
    others = ("pdl_ntf_01hbpjmytsa32fhr36nqgc3kgb_TjIG2BXbm83HPXqNfziwe506sBEdqL/4",
              "pdl_ntf_01hbpjmytsa32fhr36nqgc3kgb_vB/yIOnTOCWIvpBadM5jzBZPHc7OmdSo")
    assert reason(spec, keys_for(spec, *others), b"hello-world", {"Paddle-Signature": header},
                  1696195954) == "bad_signature"
    assert reason(spec, keys, b"hello-world", {"Paddle-Signature": header}, 1696195954 + 31) == (
        "stale_timestamp"
    )


def test_paddle_sdk_signer_and_verifier() -> None:
    spec = preset_spec("paddle")
    keys = keys_for(spec, PADDLE_SECRET)
    h1 = PaddleSignature.calculate_hmac(PADDLE_SECRET, f"{NOW}:".encode() + BODY).hexdigest()
    header = f"ts={NOW};h1={h1}"
    verify(spec, keys, Delivery(BODY, {"Paddle-Signature": header}), NOW)
    assert reason(spec, keys, BODY[1:], {"Paddle-Signature": header}) == "bad_signature"
    moved = header.replace(f"ts={NOW}", f"ts={NOW + 1}")
    assert reason(spec, keys, BODY, {"Paddle-Signature": moved}) == "bad_signature"
    assert reason(spec, keys, BODY, {"Paddle-Signature": flip(header)}) == "bad_signature"
    assert reason(spec, keys_for(spec, "pdl_other"), BODY, {"Paddle-Signature": header}) == (
        "bad_signature"
    )
    ours = sign(spec, keys[0], Delivery(BODY, {}), NOW)["Paddle-Signature"]
    assert ours == header
    assert PaddleSignature().verify(ours, BODY.decode(), Secret(PADDLE_SECRET))


# --- WorkOS: milliseconds, ", " separator; the SDK verifies ----------------------------------


def workos_header(secret: str, millis: int) -> str:
    return f"t={millis}, v1=" + mac(secret, f"{millis}.".encode() + BODY).hex()


def test_workos_hand_signed_and_sdk_accepts_ours() -> None:
    spec = preset_spec("workos")
    keys = keys_for(spec, SECRET)
    millis = NOW * 1000 + 123
    header = workos_header(SECRET, millis)
    verify(spec, keys, Delivery(BODY, {"WorkOS-Signature": header}), NOW)
    assert reason(spec, keys, BODY + b"\n", {"WorkOS-Signature": header}) == "bad_signature"
    moved = header.replace(f"t={millis}", f"t={millis + 1}")
    assert reason(spec, keys, BODY, {"WorkOS-Signature": moved}) == "bad_signature"
    assert reason(spec, keys, BODY, {"WorkOS-Signature": flip(header)}) == "bad_signature"
    assert reason(spec, keys_for(spec, SECRET_2), BODY, {"WorkOS-Signature": header}) == (
        "bad_signature"
    )
    assert reason(spec, keys, BODY, {"WorkOS-Signature": header}, NOW + 181) == "stale_timestamp"
    verify(spec, keys_for(spec, SECRET_2, SECRET), Delivery(BODY, {"WorkOS-Signature": header}),
           NOW)

    now = time.time()
    ours = sign(spec, keys[0], Delivery(BODY, {}), now)["WorkOS-Signature"]
    assert ours == workos_header(SECRET, int(now * 1000))
    workos_verify_header(event_body=BODY, event_signature=ours, secret=SECRET)
    with pytest.raises(ValueError):
        workos_verify_header(event_body=BODY, event_signature=ours, secret=SECRET_2)


# --- Zoom ------------------------------------------------------------------------------------


def zoom_headers(secret: str, timestamp: int = NOW, body: bytes = BODY) -> dict[str, str]:
    signature = "v0=" + mac(secret, f"v0:{timestamp}:".encode() + body).hex()
    return {"x-zm-signature": signature, "x-zm-request-timestamp": str(timestamp)}


def test_zoom_hand_signed() -> None:
    spec = preset_spec("zoom")
    headers = zoom_headers(SECRET)
    assert_tampering_fails(spec, keys_for(spec, SECRET), keys_for(spec, SECRET_2), BODY, headers,
                           signature_header="x-zm-signature",
                           timestamp_header="x-zm-request-timestamp")
    verify(spec, keys_for(spec, SECRET_2, SECRET), Delivery(BODY, headers), NOW)
    assert reason(spec, keys_for(spec, SECRET), BODY, headers, NOW + 301) == "stale_timestamp"


# --- Twitch: RFC 3339 timestamp with nanoseconds ---------------------------------------------

TWITCH_ID = "befa7b53-d79d-478f-86b9-120f112b044e"


def twitch_headers(secret: str, stamp: str, body: bytes = BODY) -> dict[str, str]:
    signature = mac(secret, TWITCH_ID.encode() + stamp.encode() + body).hex()
    return {"Twitch-Eventsub-Message-Id": TWITCH_ID, "Twitch-Eventsub-Message-Timestamp": stamp,
            "Twitch-Eventsub-Message-Signature": "sha256=" + signature}


def rfc3339(seconds: int, nanos: str = "123456789") -> str:
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.") + nanos + "Z"


def test_twitch_hand_signed() -> None:
    spec = preset_spec("twitch")
    stamp = rfc3339(NOW - 60)
    headers = twitch_headers(SECRET, stamp)
    assert_tampering_fails(spec, keys_for(spec, SECRET), keys_for(spec, SECRET_2), BODY, headers,
                           signature_header="Twitch-Eventsub-Message-Signature",
                           timestamp_header="Twitch-Eventsub-Message-Timestamp")
    keys = keys_for(spec, SECRET)
    changed_id = {**headers, "Twitch-Eventsub-Message-Id": TWITCH_ID.upper()}
    assert reason(spec, keys, BODY, changed_id) == "bad_signature"
    # Older than 10 minutes: rejected; from the future: accepted (Twitch checks the past only).
    old = twitch_headers(SECRET, rfc3339(NOW - 601))
    assert reason(spec, keys, BODY, old) == "stale_timestamp"
    verify(spec, keys, Delivery(BODY, twitch_headers(SECRET, rfc3339(NOW + 3600))), NOW)
    offset = twitch_headers(SECRET, "2025-10-09T10:23:20+02:00")  # = NOW - 0 s, with an offset
    verify(spec, keys, Delivery(BODY, offset),
           datetime(2025, 10, 9, 8, 23, 20, tzinfo=UTC).timestamp())
    for bad in ("2025-10-09 08:23:20Z", "2025-02-30T00:00:00Z", "1760000000", "2025-10-09T08:23:20",
                "2025-10-09T08:23:20.1234567890Z", "２０２５-10-09T08:23:20Z"):
        assert reason(spec, keys, BODY, twitch_headers(SECRET, bad)) == "bad_timestamp"


def test_twitch_sign_round_trips() -> None:
    spec = preset_spec("twitch")
    [key] = keys_for(spec, SECRET)
    added = sign(spec, key, Delivery(BODY, {"Twitch-Eventsub-Message-Id": TWITCH_ID}), NOW + 0.25)
    assert added["Twitch-Eventsub-Message-Timestamp"] == rfc3339(NOW, "250000")
    expected = twitch_headers(SECRET, added["Twitch-Eventsub-Message-Timestamp"])
    assert added["Twitch-Eventsub-Message-Signature"] == (
        expected["Twitch-Eventsub-Message-Signature"]
    )


# --- HubSpot v3: method, URL with query, body, ms timestamp; the SDK signs -------------------

HUBSPOT_SECRET = "yyyyyyyy-yyyy-yyyy-yyyy-yyyyyyyyyyyy"
HUBSPOT_BODY = json.dumps([{"eventId": 1, "subscriptionId": 7, "occurredAt": 1700000000000,
                            "attemptNumber": 0}]).encode()


def test_hubspot_sdk_vector() -> None:
    spec = preset_spec("hubspot", url="https://www.example.com/webhook_uri")
    keys = keys_for(spec, HUBSPOT_SECRET)
    headers = {"X-HubSpot-Signature-v3": "HPW73RUtKmcYoEDADG0s6MmGFWUzWJKAW07r8RDgcQw=",
               "X-HubSpot-Request-Timestamp": "15000000"}
    body = b"{'example_field':'example_value'}"
    verify(spec, keys, Delivery(body, headers, method="POST"), 15000)
    assert reason(spec, keys, body, headers, 15000, method="PUT") == "bad_signature"
    assert reason(spec, keys, body, headers, 15000, query="a=1") == "bad_signature"


def test_hubspot_sdk_signed_with_query_and_ms_timestamp() -> None:
    url = "https://hooks.example.com/webhooks/hubspot"
    spec = preset_spec("hubspot", url=url)
    keys = keys_for(spec, HUBSPOT_SECRET)
    millis = str(NOW * 1000 - 1500)
    query = "portal=42&tag=a%20b"
    signature = HubSpotSignature.get_signature(
        HUBSPOT_SECRET, HUBSPOT_BODY.decode(), "v3", http_uri=f"{url}?{query}",
        http_method="POST", timestamp=millis,
    )
    headers = {"X-HubSpot-Signature-v3": signature, "X-HubSpot-Request-Timestamp": millis}
    assert_tampering_fails(spec, keys, keys_for(spec, "zzzz"), HUBSPOT_BODY, headers,
                           signature_header="X-HubSpot-Signature-v3",
                           timestamp_header="X-HubSpot-Request-Timestamp", query=query)
    assert reason(spec, keys, HUBSPOT_BODY, headers, query="portal=43&tag=a%20b") == (
        "bad_signature"
    )
    assert reason(spec, keys, HUBSPOT_BODY, headers, query="") == "bad_signature"
    assert reason(spec, keys, HUBSPOT_BODY, headers, NOW + 301, query=query) == "stale_timestamp"

    now = time.time()
    ours = sign(spec, keys[0], Delivery(HUBSPOT_BODY, {}, query=query), now)
    assert HubSpotSignature.is_valid(
        ours["X-HubSpot-Signature-v3"], HUBSPOT_SECRET, HUBSPOT_BODY.decode(),
        http_uri=f"{url}?{query}", signature_version="v3",
        timestamp=ours["X-HubSpot-Request-Timestamp"],
    )
