"""Independent oracles: the providers' own SDKs sign deliveries our presets must accept, and
verify deliveries our ``sign()`` produces (CONVENTIONS 15)."""

from __future__ import annotations

import base64
import time
from datetime import UTC, datetime

import pytest
import standardwebhooks.webhooks
import stripe
import svix.webhooks
from slack_sdk.signature import Clock, SignatureVerifier

from sidecar.config.presets import load_preset
from sidecar.core.errors import VerificationError
from sidecar.core.signing import (
    Delivery,
    SignatureSpec,
    decode_secret,
    parse_signature_spec,
    sign,
    verify,
)

NOW = 1_760_000_000
PAYLOAD = '{"id":"evt_1","object":"event","type":"invoice.paid","data":{"note":"café ☕"}}'
BODY = PAYLOAD.encode()
STRIPE_SECRET = "whsec_test_4eC39HqLyjWDarjtT1zdp7dc"
STRIPE_SECRET_2 = "whsec_test_rolled_0123456789abcdef"
SW_SECRET = "whsec_" + base64.b64encode(bytes(range(32))).decode()
SW_SECRET_2 = "whsec_" + base64.b64encode(b"another key for rotation 24b").decode()
SLACK_SECRET = "e6b19c573432dcc6b075501d51b51bb8"


def preset_spec(name: str) -> SignatureSpec:
    return parse_signature_spec(load_preset(name)["signature"], f"presets.{name}.signature")


def keys_for(spec: SignatureSpec, *secrets: str) -> list[bytes]:
    return [decode_secret(spec, secret, f"secrets[{i}]") for i, secret in enumerate(secrets)]


def reason(spec: SignatureSpec, keys: list[bytes], body: bytes, headers: dict[str, str],
           now: float) -> str:
    with pytest.raises(VerificationError) as caught:
        verify(spec, keys, Delivery(body, headers), now)
    return caught.value.reason


def flip_hex(text: str) -> str:
    """Change the last hex digit to a different value."""
    return text[:-1] + ("0" if text[-1] != "0" else "1")


# --- Stripe ---------------------------------------------------------------------------------


def stripe_header(secret: str = STRIPE_SECRET, timestamp: int = NOW) -> str:
    return stripe.WebhookSignature.generate_signature_header(PAYLOAD, secret, timestamp=timestamp)


def test_stripe_sdk_signature_verifies() -> None:
    spec = preset_spec("stripe")
    verify(spec, keys_for(spec, STRIPE_SECRET),
           Delivery(BODY, {"Stripe-Signature": stripe_header()}), NOW)


def test_stripe_sdk_signature_with_a_decoy_v0_still_verifies() -> None:
    spec = preset_spec("stripe")
    decoy = "6ffbb59b2300aae63f272406069a9788598b792a944a07aba816edb039989a39"
    header = f"{stripe_header()},v0={decoy}"
    verify(spec, keys_for(spec, STRIPE_SECRET), Delivery(BODY, {"stripe-signature": header}),
           NOW + 1)


def test_stripe_v0_alone_is_never_accepted() -> None:
    spec = preset_spec("stripe")
    v1 = stripe_header().split("v1=")[1]
    header = f"t={NOW},v0={v1}"  # a real signature, but under the decoy scheme
    assert reason(spec, keys_for(spec, STRIPE_SECRET), BODY, {"Stripe-Signature": header},
                  NOW) == "malformed_signature"


def test_stripe_rotation_either_secret_verifies_and_both_signatures_in_one_header() -> None:
    spec = preset_spec("stripe")
    keys = keys_for(spec, STRIPE_SECRET, STRIPE_SECRET_2)
    for secret in (STRIPE_SECRET, STRIPE_SECRET_2):
        verify(spec, keys, Delivery(BODY, {"Stripe-Signature": stripe_header(secret)}), NOW)
    # While a secret is being rolled Stripe sends one v1 per active secret.
    both = stripe_header(STRIPE_SECRET_2) + ",v1=" + stripe_header().split("v1=")[1]
    verify(spec, keys_for(spec, STRIPE_SECRET), Delivery(BODY, {"Stripe-Signature": both}), NOW)
    verify(spec, keys_for(spec, STRIPE_SECRET_2), Delivery(BODY, {"Stripe-Signature": both}), NOW)


def test_stripe_failures_name_the_right_reason() -> None:
    spec = preset_spec("stripe")
    keys = keys_for(spec, STRIPE_SECRET)
    header = stripe_header()
    changed_body = BODY.replace(b"evt_1", b"evt_2")
    assert reason(spec, keys, changed_body, {"Stripe-Signature": header}, NOW) == "bad_signature"
    changed_ts = header.replace(f"t={NOW}", f"t={NOW + 1}")
    assert reason(spec, keys, BODY, {"Stripe-Signature": changed_ts}, NOW) == "bad_signature"
    changed_sig = flip_hex(header)
    assert reason(spec, keys, BODY, {"Stripe-Signature": changed_sig}, NOW) == "bad_signature"
    wrong = keys_for(spec, STRIPE_SECRET_2)
    assert reason(spec, wrong, BODY, {"Stripe-Signature": header}, NOW) == "bad_signature"
    assert reason(spec, keys, BODY, {"Stripe-Signature": header}, NOW + 301) == (
        "stale_timestamp"
    )
    assert reason(spec, keys, BODY, {"Stripe-Signature": header}, NOW - 301) == (
        "future_timestamp"
    )
    no_t = header.split(",", 1)[1]
    assert reason(spec, keys, BODY, {"Stripe-Signature": no_t}, NOW) == "missing_timestamp"
    twice = f"t={NOW},{header}"
    assert reason(spec, keys, BODY, {"Stripe-Signature": twice}, NOW) == "malformed_signature"


def test_stripe_secret_is_used_verbatim_not_base64_decoded() -> None:
    spec = preset_spec("stripe")
    assert decode_secret(spec, STRIPE_SECRET, "s") == STRIPE_SECRET.encode()


def test_our_stripe_signature_is_accepted_by_the_stripe_sdk() -> None:
    spec = preset_spec("stripe")
    now = time.time()  # the SDK checks tolerance against the real clock
    headers = sign(spec, STRIPE_SECRET.encode(), Delivery(BODY, {}), now)
    assert set(headers) == {"Stripe-Signature"}
    assert stripe.WebhookSignature.verify_header(
        PAYLOAD, headers["Stripe-Signature"], STRIPE_SECRET, tolerance=300
    )
    # Identical to what the SDK itself would send at that second.
    assert headers["Stripe-Signature"] == stripe_header(timestamp=int(now))
    with pytest.raises(stripe.SignatureVerificationError):
        stripe.WebhookSignature.verify_header(
            PAYLOAD, headers["Stripe-Signature"], STRIPE_SECRET_2, tolerance=300
        )


# --- Standard Webhooks and Svix -------------------------------------------------------------

MSG_ID = "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W"


def sw_headers(prefix: str, signature: str, timestamp: int = NOW) -> dict[str, str]:
    return {f"{prefix}-id": MSG_ID, f"{prefix}-timestamp": str(timestamp),
            f"{prefix}-signature": signature}


def sdk_sign(preset: str, secret: str, timestamp: int = NOW) -> str:
    when = datetime.fromtimestamp(timestamp, tz=UTC)
    if preset == "svix":
        return svix.webhooks.Webhook(secret).sign(MSG_ID, when, PAYLOAD)
    return standardwebhooks.webhooks.Webhook(secret).sign(MSG_ID, when, PAYLOAD)


SW_PRESETS = [("standard-webhooks", "webhook"), ("svix", "svix")]


@pytest.mark.parametrize("preset, prefix", SW_PRESETS)
def test_sdk_signatures_verify(preset: str, prefix: str) -> None:
    spec = preset_spec(preset)
    headers = sw_headers(prefix, sdk_sign(preset, SW_SECRET))
    verify(spec, keys_for(spec, SW_SECRET), Delivery(BODY, headers), NOW)


@pytest.mark.parametrize("preset, prefix", SW_PRESETS)
def test_sdk_rotation_and_several_signatures(preset: str, prefix: str) -> None:
    spec = preset_spec(preset)
    both_keys = keys_for(spec, SW_SECRET, SW_SECRET_2)
    one, two = sdk_sign(preset, SW_SECRET), sdk_sign(preset, SW_SECRET_2)
    for signature in (one, two):
        verify(spec, both_keys, Delivery(BODY, sw_headers(prefix, signature)), NOW)
    for secret in (SW_SECRET, SW_SECRET_2):
        verify(spec, keys_for(spec, secret), Delivery(BODY, sw_headers(prefix, f"{one} {two}")),
               NOW)


@pytest.mark.parametrize("preset, prefix", SW_PRESETS)
def test_sdk_signature_failures(preset: str, prefix: str) -> None:
    spec = preset_spec(preset)
    keys = keys_for(spec, SW_SECRET)
    signature = sdk_sign(preset, SW_SECRET)
    headers = sw_headers(prefix, signature)
    assert reason(spec, keys, BODY + b" ", headers, NOW) == "bad_signature"
    assert reason(spec, keys, BODY, sw_headers(prefix, signature, NOW + 1), NOW) == (
        "bad_signature"
    )
    changed = signature[:5] + ("A" if signature[5] != "A" else "B") + signature[6:]
    assert reason(spec, keys, BODY, sw_headers(prefix, changed), NOW) == "bad_signature"
    assert reason(spec, keys_for(spec, SW_SECRET_2), BODY, headers, NOW) == "bad_signature"
    assert reason(spec, keys, BODY, headers, NOW + 301) == "stale_timestamp"
    assert reason(spec, keys, BODY, headers, NOW - 301) == "future_timestamp"


@pytest.mark.parametrize("preset, prefix", SW_PRESETS)
def test_our_signature_is_accepted_by_the_sdk(preset: str, prefix: str) -> None:
    spec = preset_spec(preset)
    now = time.time()  # the SDKs check ±5 min against the real clock
    [key] = keys_for(spec, SW_SECRET)
    added = sign(spec, key, Delivery(BODY, {f"{prefix}-id": MSG_ID}), now)
    assert set(added) == {f"{prefix}-signature", f"{prefix}-timestamp"}
    headers = {f"{prefix}-id": MSG_ID, **added}
    sdk = svix.webhooks.Webhook if preset == "svix" else standardwebhooks.webhooks.Webhook
    sdk(SW_SECRET).verify(BODY, headers)
    assert added[f"{prefix}-signature"] == sdk_sign(preset, SW_SECRET, int(now))
    with pytest.raises(standardwebhooks.webhooks.WebhookVerificationError):
        sdk(SW_SECRET_2).verify(BODY, headers)


def test_sign_needs_the_headers_the_template_names() -> None:
    spec = preset_spec("standard-webhooks")
    with pytest.raises(ValueError, match="webhook-id"):
        sign(spec, b"k", Delivery(BODY, {}), NOW)


# --- Slack ----------------------------------------------------------------------------------


class FixedClock(Clock):
    def __init__(self, now: float) -> None:
        self._now = now

    def now(self) -> float:
        return self._now


def slack_headers(timestamp: int = NOW, secret: str = SLACK_SECRET) -> dict[str, str]:
    signature = SignatureVerifier(secret).generate_signature(timestamp=str(timestamp), body=BODY)
    assert signature is not None
    return {"X-Slack-Request-Timestamp": str(timestamp), "X-Slack-Signature": signature}


def test_slack_sdk_signature_verifies_and_fails_where_it_should() -> None:
    spec = preset_spec("slack")
    keys = keys_for(spec, SLACK_SECRET)
    headers = slack_headers()
    verify(spec, keys, Delivery(BODY, headers), NOW + 299)
    assert reason(spec, keys, BODY[:-1], headers, NOW) == "bad_signature"
    stale_ts = {**headers, "X-Slack-Request-Timestamp": str(NOW - 1)}
    assert reason(spec, keys, BODY, stale_ts, NOW) == "bad_signature"
    changed = {**headers, "X-Slack-Signature": flip_hex(headers["X-Slack-Signature"])}
    assert reason(spec, keys, BODY, changed, NOW) == "bad_signature"
    assert reason(spec, keys_for(spec, "0" * 32), BODY, headers, NOW) == "bad_signature"


def test_slack_sdk_rotation_across_secrets() -> None:
    spec = preset_spec("slack")
    keys = keys_for(spec, "1" * 32, SLACK_SECRET)
    verify(spec, keys, Delivery(BODY, slack_headers()), NOW)
    verify(spec, keys, Delivery(BODY, slack_headers(secret="1" * 32)), NOW)


def test_our_slack_signature_is_accepted_by_slack_sdk() -> None:
    spec = preset_spec("slack")
    [key] = keys_for(spec, SLACK_SECRET)
    added = sign(spec, key, Delivery(BODY, {}), NOW + 0.75)
    assert added == slack_headers()
    verifier = SignatureVerifier(SLACK_SECRET, clock=FixedClock(NOW + 10))
    assert verifier.is_valid(BODY, added["X-Slack-Request-Timestamp"], added["X-Slack-Signature"])
    other = SignatureVerifier("f" * 32, clock=FixedClock(NOW))
    assert not other.is_valid(BODY, added["X-Slack-Request-Timestamp"],
                              added["X-Slack-Signature"])


def test_past_only_direction_accepts_the_future_like_the_stripe_sdk() -> None:
    data = load_preset("stripe")["signature"]
    assert isinstance(data, dict)
    data["timestamp"]["direction"] = "past"
    spec = parse_signature_spec(data, "s")
    keys = keys_for(spec, STRIPE_SECRET)
    header = {"Stripe-Signature": stripe_header(timestamp=NOW + 3600)}
    verify(spec, keys, Delivery(BODY, header), NOW)
    assert reason(spec, keys, BODY, header, NOW + 3600 + 301) == "stale_timestamp"
    # The shipped preset checks both ways.
    assert reason(preset_spec("stripe"), keys, BODY, header, NOW) == "future_timestamp"
