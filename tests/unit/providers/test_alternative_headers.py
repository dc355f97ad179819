"""Alternative header names (``header: [A, B]``: the first one present is read) for the
signature, its timestamp and the event id; and optional whitespace in ``kv_list`` headers.
The providers' own packages sign these deliveries in ``test_node_oracles.py``; here the HMAC
is written out from Shopify's documented recipe."""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Any

import pytest

from sidecar.config.loader import load_config_text
from sidecar.core.errors import ConfigError, EventIdError
from sidecar.core.eventid import extract_event_id, parse_event_id_spec
from sidecar.core.signing import Delivery, PluginSpec, parse_signature_spec, sign, verify
from sidecar.core.signing.formats import KvListFormat

from .helpers import NOW, flip, keys_for, preset_event_id, preset_spec, reason

BODY = b'{"id":1,"note":"caf\xc3\xa9"}'
SECRET = "shopify-client-secret"


def shopify_hmac(body: bytes = BODY, secret: str = SECRET) -> str:
    return base64.b64encode(hmac.new(secret.encode(), body, hashlib.sha256).digest()).decode()


def test_shopify_reads_either_name_first_present_wins() -> None:
    spec = preset_spec("shopify")
    keys = keys_for(spec, SECRET)
    good = shopify_hmac()
    verify(spec, keys, Delivery(BODY, {"X-Shopify-Hmac-Sha256": good}), NOW)
    verify(spec, keys, Delivery(BODY, {"shopify-hmac-sha256": good}), NOW)
    # Names are case-insensitive.
    verify(spec, keys, Delivery(BODY, {"SHOPIFY-HMAC-SHA256": good}), NOW)
    # The first name present is the one read: a bad prefixed header is not rescued by the other.
    both = {"X-Shopify-Hmac-Sha256": flip(good), "shopify-hmac-sha256": good}
    assert reason(spec, keys, BODY, both) == "bad_signature"
    assert reason(spec, keys, BODY, {"X-Shopify-Hmac-Sha256": "", "shopify-hmac-sha256": good}) \
        == "missing_signature"
    assert reason(spec, keys, BODY, {"shopify-hmac-sha256": flip(good)}) == "bad_signature"
    assert reason(spec, keys, BODY + b" ", {"shopify-hmac-sha256": good}) == "bad_signature"
    assert reason(spec, keys, BODY, {"X-Shopify-Hmac": good}) == "missing_signature"


def test_shopify_event_id_from_either_name() -> None:
    spec = preset_event_id("shopify")
    assert spec.headers == ("X-Shopify-Webhook-Id", "shopify-webhook-id")
    assert extract_event_id(spec, b"{}", {"shopify-webhook-id": "w-1"}) == "w-1"
    assert extract_event_id(spec, b"{}", {"X-Shopify-Webhook-Id": "w-2",
                                          "shopify-webhook-id": "w-1"}) == "w-2"
    with pytest.raises(EventIdError, match="X-Shopify-Webhook-Id or shopify-webhook-id"):
        extract_event_id(spec, b"{}", {"shopify-event-id": "e-1"})  # shared: never the id


def test_sign_writes_the_first_name_and_timestamp_alternatives_are_read() -> None:
    spec = parse_signature_spec({
        "algorithm": "hmac-sha256", "header": ["X-Sig", "Sig"], "format": {"type": "plain"},
        "encoding": "hex", "message": "{timestamp}.{body}",
        "timestamp": {"header": ["X-Sig-Time", "Sig-Time"]},
    }, "providers.acme.signature")
    [key] = keys_for(spec, SECRET)
    signed = sign(spec, key, Delivery(BODY, {}), NOW)
    assert set(signed) == {"X-Sig", "X-Sig-Time"}
    renamed = {"Sig": signed["X-Sig"], "Sig-Time": signed["X-Sig-Time"]}
    verify(spec, [key], Delivery(BODY, renamed), NOW)
    assert reason(spec, [key], BODY, {"Sig": signed["X-Sig"]}) == "missing_timestamp"


def test_composite_part_header_alternatives() -> None:
    spec = parse_event_id_spec({"composite": [{"header": ["X-Shop", "shop"]}, {"json": "$.id"}]},
                               "providers.acme.event_id")
    assert extract_event_id(spec, BODY, {"shop": "a.myshopify.com"}) == "a.myshopify.com:1"


@pytest.mark.parametrize("separator", [",", ", ", " , "])
@pytest.mark.parametrize("value", ["t=1,v1=ab,v1=cd", "t=1, v1=ab, v1=cd", "t=1 ,\tv1=ab ,v1=cd"])
def test_kv_list_whitespace_around_pairs_is_optional(separator: str, value: str) -> None:
    parts = KvListFormat(("v1",), separator, "=", "t").parse(value)
    assert parts.signatures == ("ab", "cd")
    assert parts.timestamp == "1"


def test_stripe_and_paddle_accept_spaces_after_their_separator() -> None:
    for preset, header, value in (("stripe", "Stripe-Signature", "t={t}, v1={sig}"),
                                  ("paddle", "Paddle-Signature", "ts={t}; h1={sig}")):
        spec = preset_spec(preset)
        [key] = keys_for(spec, "whsec_x")
        signed = sign(spec, key, Delivery(BODY, {}), NOW)[header]
        sig = signed.rsplit("=", 1)[1]
        verify(spec, [key], Delivery(BODY, {header: value.format(t=NOW, sig=sig)}), NOW)


SIGNATURE = {"algorithm": "hmac-sha256", "format": {"type": "plain"}, "encoding": "hex",
             "message": "{body}"}
BAD_LISTS: list[tuple[Any, str, str]] = [
    ([], "signature.header", "non-empty list of header names"),
    ({"X-Sig": 1}, "signature.header", "non-empty list of header names"),
    (7, "signature.header", "non-empty list of header names"),
    (["X-Sig", ""], "signature.header[1]", "'' is not a valid HTTP header name"),
    (["X-Sig", "X Sig"], "signature.header[1]", "'X Sig' is not a valid HTTP header name"),
    ([None], "signature.header[0]", "must be a header name"),
    (["X-Sig", ["Sig"]], "signature.header[1]", "must be a header name"),
    (["X-Sig", "Sig", "X-Sig"], "signature.header[2]", "repeats signature.header[0]"),
]


@pytest.mark.parametrize(("header", "where", "message"), BAD_LISTS)
def test_bad_signature_header_lists_name_the_key_path(header: Any, where: str,
                                                      message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_signature_spec({**SIGNATURE, "header": header}, "signature")
    assert caught.value.path == where
    assert message in str(caught.value)


@pytest.mark.parametrize(("data", "where"), [
    ({"header": []}, "event_id.header"),
    ({"header": ["X-Id", "bad id"]}, "event_id.header[1]"),
    ({"header": ["X-Id", "X-Id"]}, "event_id.header[1]"),
    ({"composite": [{"header": ["X-A", 3]}, {"json": "$.id"}]}, "event_id.composite[0].header[1]"),
    ({"batch": {"items": "$[*]", "item_id": {"header": [""]}}},
     "event_id.batch.item_id.header[0]"),
])
def test_bad_event_id_header_lists_name_the_key_path(data: Any, where: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_event_id_spec(data, "event_id")
    assert caught.value.path == where


def test_bad_timestamp_header_list_names_the_key_path() -> None:
    data = {**SIGNATURE, "header": "X-Sig", "message": "{timestamp}{body}",
            "timestamp": {"header": ["X-Time", "X:Time"]}}
    with pytest.raises(ConfigError) as caught:
        parse_signature_spec(data, "signature")
    assert caught.value.path == "signature.timestamp.header[1]"


def test_through_the_config_loader_lists_load_and_errors_name_the_provider_path() -> None:
    def text(block: str) -> str:
        return ("upstream: {url: 'http://127.0.0.1:3000'}\n"
                "store: {url: 'sqlite:////tmp/unused.db'}\n"
                f"providers:\n  acme:\n    path: /acme\n    secrets: [s]\n{block}")

    declared = ("    signature: {algorithm: hmac-sha256, header: [X-Acme-Sig, acme-sig],\n"
                "                format: {type: plain}, encoding: hex, message: '{body}'}\n"
                "    event_id: {header: [X-Acme-Id, acme-id]}\n")
    [acme] = load_config_text(text(declared), env={}).providers
    assert acme.event_id is not None and acme.event_id.headers == ("X-Acme-Id", "acme-id")
    with pytest.raises(ConfigError) as caught:
        load_config_text(text(declared.replace("acme-sig]", "'acme sig']")), env={})
    assert caught.value.path == "providers.acme.signature.header[1]"
    # A preset's list can be overridden like any other key.
    override = "    preset: shopify\n    signature: {header: [shopify-hmac-sha256]}\n"
    [shop] = load_config_text(text(override), env={}).providers
    assert not isinstance(shop.signature, PluginSpec)
    assert shop.signature.headers == ("shopify-hmac-sha256",)
