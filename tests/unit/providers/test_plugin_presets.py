"""Plugin presets (Twilio, Adyen, Mailgun): published vectors, the providers' SDKs as signers
and verifiers, tampering, rotation, and configuration errors."""

from __future__ import annotations

import copy
import hashlib
import hmac
import json
import time
from urllib.parse import urlencode

import pytest
from Adyen.util import generate_notification_sig, is_valid_hmac_notification
from mailgun.security import SecurityGuard
from twilio.request_validator import RequestValidator

from sidecar.core.errors import ConfigError
from sidecar.core.signing import Delivery, parse_signature_spec, sign, sign_delivery, verify

from .helpers import NOW, flip, keys_for, preset_spec, reason

# --- Twilio ----------------------------------------------------------------------------------

DOCS_PARAMS = [("CallSid", "CA1234567890ABCDE"), ("Caller", "+12349013030"), ("Digits", "1234"),
               ("From", "+12349013030"), ("To", "+18005551212")]
SDK_PARAMS = [("CallSid", "CA1234567890ABCDE"), ("Digits", "1234"), ("From", "+14158675309"),
              ("To", "+18005551212"), ("Caller", "+14158675309")]


def form(params: list[tuple[str, str]]) -> bytes:
    return urlencode(params).encode()


def twilio(url: str, signature: str, settings: str | None = None) -> tuple[object, dict[str, str]]:
    headers = {"X-Twilio-Signature": signature}
    if settings is not None:
        headers["X-Twilio-Webhooks-Signature-Settings"] = settings
    return preset_spec("twilio", url=url), headers


@pytest.mark.parametrize(
    "url, params, signature",
    [
        ("https://mycompany.com/myapp.php", DOCS_PARAMS, "0/KCTR6DLpKmkAf8muzZqo1nDgQ="),
        ("https://mycompany.com/myapp.php", SDK_PARAMS, "RSOYDt4T1cUTdK1PDd93/VVr8B8="),
        # The SDK's port vectors: signed with the default port, configured without (and back).
        ("https://mycompany.com:443/myapp.php", SDK_PARAMS, "RSOYDt4T1cUTdK1PDd93/VVr8B8="),
        ("https://mycompany.com/myapp.php", SDK_PARAMS, "kvajT1Ptam85bY51eRf/AJRuM3w="),
        ("http://mycompany.com/myapp.php", SDK_PARAMS, "0ZXoZLH/DfblKGATFgpif+LLRf4="),
        ("http://mycompany.com:1234/myapp.php", SDK_PARAMS, "Zmvh+3yNM1Phv2jhDCwEM3q5ebU="),
        ("https://mycompany.com/myapp.php",
         [("Sid", "CA123"), ("SidAccount", "AC123"), ("Digits", "5678"), ("Digits", "1234")],
         "IK+Dwps556ElfBT0I3Rgjkr1wJU="),
    ],
)
def test_twilio_published_vectors(url: str, params: list[tuple[str, str]], signature: str) -> None:
    spec, headers = twilio(url, signature)
    keys = keys_for(spec, "12345")
    body = form(params)
    verify(spec, keys, Delivery(body, headers, query="foo=1&bar=2"), NOW)
    assert reason(spec, keys, body, headers, query="foo=1&bar=3") == "bad_signature"
    assert reason(spec, keys, form([*params, ("Extra", "1")]), headers,
                  query="foo=1&bar=2") == "bad_signature"
    assert reason(spec, keys_for(spec, "12346"), body, headers, query="foo=1&bar=2") == (
        "bad_signature"
    )
    assert reason(spec, keys, body, {"X-Twilio-Signature": flip(signature)},
                  query="foo=1&bar=2") == "bad_signature"


def test_twilio_json_body_uses_body_sha256() -> None:
    body = b'{"property": "value", "boolean": true}'
    digest = "0a1ff7634d9ab3b95db5c9a2dfe9416e41502b283a80c7cf19632632f96e6620"
    assert hashlib.sha256(body).hexdigest() == digest
    spec, headers = twilio("https://mycompany.com/myapp.php", "a9nBmqA0ju/hNViExpshrM61xv4=")
    keys = keys_for(spec, "12345")
    query = f"foo=1&bar=2&bodySHA256={digest}"
    verify(spec, keys, Delivery(body, headers, query=query), NOW)
    # The body is bound through its hash: a changed body fails although the URL still matches.
    assert reason(spec, keys, body.replace(b"true", b"false"), headers, query=query) == (
        "bad_signature"
    )


def test_twilio_sdk_signs_sha1_and_sha256_and_accepts_ours() -> None:
    url = "https://hooks.example.com/webhooks/twilio"
    params = {"MessageSid": "SM1234", "Body": "héllo wörld", "From": "+15550001111", "Empty": ""}
    body = form(list(params.items()))
    validator = RequestValidator("auth-token-1")
    for algorithm, settings in (("HMAC_SHA1", None),
                                ("HMAC_SHA256", "key=webhooks_sharedkey_1,algorithm=HMAC_SHA256")):
        signature = validator.compute_signature(f"{url}?a=1", params, algorithm)
        spec, headers = twilio(url, signature, settings)
        keys = keys_for(spec, "auth-token-2", "auth-token-1")  # rotation: second key matches
        verify(spec, keys, Delivery(body, headers, query="a=1"), NOW)
        # The settings header chooses the algorithm: the other one fails.
        swapped = dict(headers)
        if settings is None:
            swapped["X-Twilio-Webhooks-Signature-Settings"] = "algorithm=HMAC_SHA256"
        else:
            del swapped["X-Twilio-Webhooks-Signature-Settings"]
        assert reason(spec, keys, body, swapped, query="a=1") == "bad_signature"
    unknown = {"X-Twilio-Signature": "AAAA", "X-Twilio-Webhooks-Signature-Settings":
               "algorithm=HMAC_MD5"}
    assert reason(spec, keys, body, unknown, query="a=1") == "unsupported_algorithm"

    [key] = keys_for(spec, "auth-token-1")
    ours = sign(spec, key, Delivery(body, {}, query="a=1"), NOW)
    assert validator.validate(f"{url}?a=1", params, ours["X-Twilio-Signature"])
    assert not validator.validate(f"{url}?a=2", params, ours["X-Twilio-Signature"])


def test_twilio_pinned_algorithm_refuses_the_other() -> None:
    data = {"plugin": "twilio", "url": "https://hooks.example.com/t", "algorithm": "hmac-sha256"}
    spec = parse_signature_spec(data, "p.signature")
    keys = keys_for(spec, "tok")
    body = form([("A", "1")])
    added = sign(spec, keys[0], Delivery(body, {}), NOW)
    assert added["X-Twilio-Webhooks-Signature-Settings"] == "algorithm=HMAC_SHA256"
    verify(spec, keys, Delivery(body, {"X-Twilio-Signature": added["X-Twilio-Signature"]}), NOW)
    sha1 = RequestValidator("tok").compute_signature("https://hooks.example.com/t", {"A": "1"})
    assert reason(spec, keys, body, {"X-Twilio-Signature": sha1}) == "bad_signature"


@pytest.mark.parametrize(
    "data, path",
    [
        ({"plugin": "twilio"}, "p.signature.url"),
        ({"plugin": "twilio", "url": "/relative"}, "p.signature.url"),
        ({"plugin": "twilio", "url": "https://u:p@host/x"}, "p.signature.url"),
        ({"plugin": "twilio", "url": "https://h/x", "algorithm": "md5"}, "p.signature.algorithm"),
        ({"plugin": "twilio", "url": "https://h/x", "header": "X"}, "p.signature.header"),
        ({"plugin": "twilio", "url": "https://h/x", "secret": {"encoding": "rot13"}},
         "p.signature.secret.encoding"),
        ({"plugin": "adyen", "url": "https://h/x"}, "p.signature.url"),
        ({"plugin": "mailgun", "tolerance": "0s"}, "p.signature.tolerance"),
        ({"plugin": "paypal"}, "p.signature.plugin"),
    ],
)
def test_plugin_config_errors_name_the_key(data: dict[str, object], path: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_signature_spec(data, "p.signature")
    assert caught.value.path == path


# --- Adyen -----------------------------------------------------------------------------------

ADYEN_KEY = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056"
ADYEN_KEY_2 = "11" * 32
ITEM = {
    "pspReference": "7914073381342284", "merchantAccountCode": "TestMerchant",
    "merchantReference": "TestPayment-1407325143704", "amount": {"value": 1130, "currency": "EUR"},
    "eventCode": "AUTHORISATION", "success": "true",
    "additionalData": {"hmacSignature": "coqCmt/IZ4E3CzPvMY8zTjQVL5hYJUiBRg8UU+iCWo0="},
}


def adyen_body(*items: dict[str, object]) -> bytes:
    envelope = {"live": "false",
                "notificationItems": [{"NotificationRequestItem": item} for item in items]}
    return json.dumps(envelope).encode()


def test_adyen_published_vector_and_tampering() -> None:
    spec = preset_spec("adyen")
    keys = keys_for(spec, ADYEN_KEY)
    verify(spec, keys, Delivery(adyen_body(ITEM), {}), NOW)
    for field, value in (("pspReference", "7914073381342285"), ("eventCode", "CAPTURE"),
                         ("success", "false"), ("amount", {"value": 1131, "currency": "EUR"}),
                         ("originalReference", "x")):
        changed = {**ITEM, field: value}
        assert reason(spec, keys, adyen_body(changed), {}) == "bad_signature", field
    tampered = {**ITEM, "additionalData": {"hmacSignature": flip(
        "coqCmt/IZ4E3CzPvMY8zTjQVL5hYJUiBRg8UU+iCWo0=")}}
    assert reason(spec, keys, adyen_body(tampered), {}) == "bad_signature"
    assert reason(spec, keys_for(spec, ADYEN_KEY_2), adyen_body(ITEM), {}) == "bad_signature"
    # Fields outside the signed eight are not covered (the scheme's property, documented).
    verify(spec, keys, Delivery(adyen_body({**ITEM, "reason": "anything"}), {}), NOW)


def test_adyen_sdk_signs_each_item_and_every_item_must_verify() -> None:
    spec = preset_spec("adyen")
    second = {**ITEM, "pspReference": "8814073381342299", "eventCode": "CAPTURE"}
    del second["additionalData"]
    signed_second = {**second, "additionalData": {
        "hmacSignature": generate_notification_sig(second, ADYEN_KEY_2).decode()}}
    body = adyen_body(ITEM, signed_second)
    # Rotation, per item.
    verify(spec, keys_for(spec, ADYEN_KEY, ADYEN_KEY_2), Delivery(body, {}), NOW)
    assert reason(spec, keys_for(spec, ADYEN_KEY), body, {}) == "bad_signature"
    unsigned = adyen_body(ITEM, second)
    assert reason(spec, keys_for(spec, ADYEN_KEY, ADYEN_KEY_2), unsigned, {}) == (
        "missing_signature"
    )
    assert reason(spec, keys_for(spec, ADYEN_KEY), b'{"notificationItems": []}', {}) == (
        "missing_signature"
    )
    assert reason(spec, keys_for(spec, ADYEN_KEY), b"[accepted]", {}) == "malformed_body"

    key = keys_for(spec, ADYEN_KEY)[0]
    bare = {k: v for k, v in ITEM.items() if k != "additionalData"}
    signed = sign_delivery(spec, key, Delivery(adyen_body(bare), {}), NOW)
    assert signed.headers == {}
    envelope = json.loads(signed.body)
    item = envelope["notificationItems"][0]["NotificationRequestItem"]
    assert item["additionalData"]["hmacSignature"] == ITEM["additionalData"]["hmacSignature"]
    assert is_valid_hmac_notification(copy.deepcopy(envelope), ADYEN_KEY)
    with pytest.raises(ValueError, match="sign_delivery"):
        sign(spec, key, Delivery(adyen_body(bare), {}), NOW)


# --- Mailgun ---------------------------------------------------------------------------------

MG_KEY = "key-mailgun-webhook-signing-0123456789"


def mailgun_body(key: str, timestamp: int, token: str, **extra: object) -> bytes:
    signature = hmac.new(key.encode(), f"{timestamp}{token}".encode(), hashlib.sha256).hexdigest()
    document = {"signature": {"timestamp": str(timestamp), "token": token,
                              "signature": signature},
                "event-data": {"id": "CPgfbmQMTCKtHW6uIWtuVe", "event": "delivered", **extra}}
    return json.dumps(document).encode()


def test_mailgun_hand_signed_and_tampering() -> None:
    spec = preset_spec("mailgun")
    keys = keys_for(spec, MG_KEY)
    token = "a8ce0edb2dd8301dee6c2405235584e45aa91d1e9f979f3de0"
    body = mailgun_body(MG_KEY, NOW, token)
    verify(spec, keys, Delivery(body, {}), NOW + 899)
    verify(spec, keys_for(spec, "old-key", MG_KEY), Delivery(body, {}), NOW)
    assert reason(spec, keys_for(spec, "other-key"), body, {}) == "bad_signature"
    document = json.loads(body)
    for field, value in (("timestamp", str(NOW + 1)), ("token", token[:-1] + "1"),
                         ("signature", flip(document["signature"]["signature"]))):
        changed = copy.deepcopy(document)
        changed["signature"][field] = value
        assert reason(spec, keys, json.dumps(changed).encode(), {}) == "bad_signature", field
    assert reason(spec, keys, body, {}, NOW + 901) == "stale_timestamp"
    assert reason(spec, keys, body, {}, NOW - 901) == "future_timestamp"
    # The documented caveat: the body is not signed, a changed event verifies.
    changed_event = copy.deepcopy(document)
    changed_event["event-data"]["event"] = "failed"
    verify(spec, keys, Delivery(json.dumps(changed_event).encode(), {}), NOW)


def test_mailgun_sdk_accepts_our_signature() -> None:
    spec = preset_spec("mailgun")
    [key] = keys_for(spec, MG_KEY)
    payload = json.dumps({"event-data": {"id": "evt-1", "event": "opened"}}).encode()
    now = time.time()
    signed = sign_delivery(spec, key, Delivery(payload, {}), now)
    block = json.loads(signed.body)["signature"]
    assert SecurityGuard.verify_webhook(MG_KEY, block["token"], block["timestamp"],
                                        block["signature"])
    assert not SecurityGuard.verify_webhook("wrong", block["token"], block["timestamp"],
                                            block["signature"])
    verify(spec, [key], Delivery(signed.body, {}), now)
