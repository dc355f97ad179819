"""The providers' own Node.js packages as oracles: ``@shopify/shopify-api`` and
``@workos-inc/node`` sign deliveries our presets must accept, and verify the deliveries our
``sign`` produces (the ``node_oracle`` fixture: ``tests/node_oracle.py``).
"""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import pytest

from sidecar.core.errors import VerificationError
from sidecar.core.eventid import extract_event_id
from sidecar.core.signing import Delivery, sign, sign_delivery, verify
from tests.node_oracle import Oracle

from .helpers import assert_tampering_fails, flip_byte, keys_for, preset_event_id, preset_spec

SECRET = "shpss_0123456789abcdef0123456789abcdef"
OTHER = "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"
SHOPIFY_BODY = '{"id":820982911946154508,"note":"café ☕","total_price":"1.00"}'.encode()
# WorkOS's Node SDK signs JSON.stringify(JSON.parse(body)): the body must be compact JSON.
WORKOS_BODY = '{"id":"event_01HXYZ","event":"dsync.user.created","data":{"n":"café"}}'.encode()

def _request(provider: str, action: str, body: bytes, **extra: Any) -> dict[str, Any]:
    return {"provider": provider, "action": action, "secret": SECRET,
            "body_b64": base64.b64encode(body).decode(), **extra}


# --- Shopify ---------------------------------------------------------------------------------

EVENTS_HEADERS = {"shopify-topic": "orders/create", "shopify-shop-domain": "x.myshopify.com",
                  "shopify-api-version": "2026-01", "shopify-webhook-id": "b54557e4-events"}
WEBHOOK_HEADERS = {"X-Shopify-Topic": "orders/create", "X-Shopify-Shop-Domain": "x.myshopify.com",
                   "X-Shopify-API-Version": "2026-01", "X-Shopify-Webhook-Id": "b54557e4-hooks"}


def _shopify_hmac(node_oracle: Oracle, body: bytes = SHOPIFY_BODY) -> str:
    signed = node_oracle(_request("shopify", "sign", body))["headers"]
    value: str = signed["shopify-hmac-sha256"]
    return value


def test_shopify_events_delivery_signed_by_the_package_verifies(node_oracle: Oracle) -> None:
    headers = {**EVENTS_HEADERS, "shopify-hmac-sha256": _shopify_hmac(node_oracle)}
    # The package itself takes it for an Events delivery and accepts it.
    assert node_oracle(_request("shopify", "verify", SHOPIFY_BODY, headers=headers)) == {
        "valid": True, "detail": "events"}
    spec = preset_spec("shopify")
    keys, wrong = keys_for(spec, SECRET), keys_for(spec, OTHER)
    assert_tampering_fails(spec, keys, wrong, SHOPIFY_BODY, headers,
                           signature_header="shopify-hmac-sha256")
    assert extract_event_id(preset_event_id("shopify"), SHOPIFY_BODY, headers) == (
        "b54557e4-events")


def test_shopify_prefixed_delivery_signed_by_the_package_verifies(node_oracle: Oracle) -> None:
    headers = {**WEBHOOK_HEADERS, "X-Shopify-Hmac-Sha256": _shopify_hmac(node_oracle)}
    assert node_oracle(_request("shopify", "verify", SHOPIFY_BODY, headers=headers)) == {
        "valid": True, "detail": "webhooks"}
    spec = preset_spec("shopify")
    assert_tampering_fails(spec, keys_for(spec, SECRET), keys_for(spec, OTHER), SHOPIFY_BODY,
                           headers, signature_header="X-Shopify-Hmac-Sha256")
    assert extract_event_id(preset_event_id("shopify"), SHOPIFY_BODY, headers) == (
        "b54557e4-hooks")


def test_shopify_package_accepts_what_we_sign_under_either_name(node_oracle: Oracle) -> None:
    spec = preset_spec("shopify")
    [key] = keys_for(spec, SECRET)
    ours = sign(spec, key, Delivery(SHOPIFY_BODY, {}), time.time())
    assert list(ours) == ["X-Shopify-Hmac-Sha256"]  # sign writes the first name
    value = ours["X-Shopify-Hmac-Sha256"]
    for headers in ({**WEBHOOK_HEADERS, "X-Shopify-Hmac-Sha256": value},
                    {**EVENTS_HEADERS, "shopify-hmac-sha256": value}):
        assert node_oracle(_request("shopify", "verify", SHOPIFY_BODY, headers=headers))["valid"]
        changed = node_oracle(_request("shopify", "verify", flip_byte(SHOPIFY_BODY, 2),
                                       headers=headers))
        assert changed["valid"] is False


# --- WorkOS ----------------------------------------------------------------------------------


def _workos_header(node_oracle: Oracle, millis: int, body: bytes = WORKOS_BODY) -> str:
    signed = node_oracle(_request("workos", "sign", body, timestamp_ms=millis))["headers"]
    value: str = signed["WorkOS-Signature"]
    return value


def test_workos_unspaced_header_signed_by_the_sdk_verifies(node_oracle: Oracle) -> None:
    now = time.time()
    header = _workos_header(node_oracle, int(now * 1000))
    assert ", " not in header and header.startswith("t=")  # "t=…,v1=…", as the SDK splits
    spec = preset_spec("workos")
    keys, wrong = keys_for(spec, SECRET), keys_for(spec, OTHER)
    assert_tampering_fails(spec, keys, wrong, WORKOS_BODY, {"WorkOS-Signature": header},
                           signature_header="WorkOS-Signature", now=now)
    # WorkOS's own spaced form, and a tab, parse alike.
    for spaced in (header.replace(",", ", "), header.replace(",", ",\t")):
        verify(spec, keys, Delivery(WORKOS_BODY, {"WorkOS-Signature": spaced}), now)
    assert node_oracle(_request("workos", "verify", WORKOS_BODY,
                                headers={"WorkOS-Signature": header}))["valid"]


def test_workos_sdk_accepts_what_we_sign(node_oracle: Oracle) -> None:
    spec = preset_spec("workos")
    [key] = keys_for(spec, SECRET)
    header = sign(spec, key, Delivery(WORKOS_BODY, {}), time.time())["WorkOS-Signature"]
    assert header.startswith("t=") and ", v1=" in header  # rendered as WorkOS writes it
    for value in (header, header.replace(", ", ",")):
        answer = node_oracle(_request("workos", "verify", WORKOS_BODY,
                                      headers={"WorkOS-Signature": value}))
        assert answer == {"valid": True, "detail": ""}
    changed = WORKOS_BODY.replace(b"created", b"deleted")
    answer = node_oracle(_request("workos", "verify", changed,
                                  headers={"WorkOS-Signature": header}))
    assert answer["valid"] is False


# --- Linear ----------------------------------------------------------------------------------

LINEAR_SECRET = "lin_wh_0123456789abcdefghijklmnopqrstuv"


def _linear_verifies(node_oracle: Oracle, body: bytes, headers: dict[str, str]) -> bool:
    answer = node_oracle({"provider": "linear", "action": "verify", "secret": LINEAR_SECRET,
                          "body_b64": base64.b64encode(body).decode(), "headers": headers})
    valid: bool = answer["valid"]
    return valid


def test_linear_sdk_and_the_preset_agree_on_fresh_and_stale_bodies(node_oracle: Oracle) -> None:
    """``sign_delivery`` (what ``send`` does) stamps webhookTimestamp and signs; @linear/sdk's
    own verifier accepts it. The same body ten minutes old: both refuse it."""
    spec = preset_spec("linear")
    keys = keys_for(spec, LINEAR_SECRET)
    template = json.dumps({"action": "create", "type": "Issue", "webhookTimestamp": 0,
                           "data": {"title": "café"}}).encode()
    now = time.time()
    for age, accepted in ((0, True), (600, False)):
        signed = sign_delivery(spec, LINEAR_SECRET.encode(), Delivery(template, {}), now - age)
        assert json.loads(signed.body)["webhookTimestamp"] == int((now - age) * 1000)
        assert _linear_verifies(node_oracle, signed.body, signed.headers) is accepted
        if accepted:
            verify(spec, keys, Delivery(signed.body, signed.headers), time.time())
        else:
            with pytest.raises(VerificationError, match="stale_timestamp"):
                verify(spec, keys, Delivery(signed.body, signed.headers), time.time())
