"""Handshakes the proxy answers itself: each gets the answer its provider requires; other
deliveries are not handshakes."""

from __future__ import annotations

import hashlib
import hmac
import json

import pytest

from sidecar.config.presets import load_preset
from sidecar.core.errors import ConfigError
from sidecar.core.handshake import (
    HandshakeAnswer,
    HandshakeSpec,
    handshake_answer,
    parse_handshake_spec,
)


def preset_handshake(name: str) -> HandshakeSpec:
    return parse_handshake_spec(load_preset(name)["handshake"], f"presets.{name}.handshake")


def test_slack_url_verification() -> None:
    spec = preset_handshake("slack")
    body = b'{"token":"Jhj5dZrVaK7ZwHHjRyZWjbDl","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gm'\
           b'dQ8Yn","type":"url_verification"}'
    answer = handshake_answer(spec, body)
    assert answer == HandshakeAnswer(
        200, "application/json", b'{"challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdQ8Yn"}'
    )
    assert handshake_answer(spec, b'{"type":"event_callback","event_id":"Ev1"}') is None
    assert handshake_answer(spec, b"not json") is None


def test_zoom_url_validation_answers_with_the_hmac_of_the_plain_token() -> None:
    spec = preset_handshake("zoom")
    body = b'{"payload":{"plainToken":"qgg8vlvZRS6UYooatFL8Aw"},"event_ts":1654503849680,' \
           b'"event":"endpoint.url_validation"}'
    secret = b"zoom-secret-token"
    answer = handshake_answer(spec, body, {}, [secret, b"older-secret"])
    assert answer is not None and (answer.status, answer.content_type) == (200, "application/json")
    expected = hmac.new(secret, b"qgg8vlvZRS6UYooatFL8Aw", hashlib.sha256).hexdigest()
    assert json.loads(answer.body) == {"plainToken": "qgg8vlvZRS6UYooatFL8Aw",
                                       "encryptedToken": expected}
    # Without a key, or without a token, it is refused, never forwarded.
    for keys, payload in (([], body), ([secret], b'{"event":"endpoint.url_validation"}')):
        refused = handshake_answer(spec, payload, {}, keys)
        assert refused is not None and refused.status == 400
    assert handshake_answer(spec, b'{"event":"meeting.started"}', {}, [secret]) is None


def test_twitch_callback_verification_answers_the_raw_challenge() -> None:
    spec = preset_handshake("twitch")
    body = b'{"challenge":"pogchamp-kappa-360noscope-vohiyo","subscription":{"id":"f1c2"}}'
    headers = {"twitch-eventsub-message-type": "webhook_callback_verification"}
    answer = handshake_answer(spec, body, headers)
    assert answer == HandshakeAnswer(200, "text/plain; charset=utf-8",
                                     b"pogchamp-kappa-360noscope-vohiyo")
    notification = {"Twitch-Eventsub-Message-Type": "notification"}
    assert handshake_answer(spec, body, notification) is None
    assert handshake_answer(spec, body, {}) is None
    missing = handshake_answer(spec, b'{"challenge": 5}', headers)
    assert missing is not None and missing.status == 400
    assert handshake_answer(spec, b"{nope", headers) == HandshakeAnswer(
        400, "application/json", b'{"error": "malformed handshake", "reason": "body is not JSON"}'
    )


def test_discord_ping_gets_a_pong() -> None:
    spec = preset_handshake("discord")
    answer = handshake_answer(spec, b'{"id":"1","application_id":"2","type":1,"version":1}')
    assert answer == HandshakeAnswer(200, "application/json", b'{"type": 1}')
    assert handshake_answer(spec, b'{"id":"1","type":2}') is None
    assert handshake_answer(spec, b'{"id":"1","type":true}') is None  # JSON true is not 1
    assert handshake_answer(spec, b'{"id":"1","type":"1"}') is None


def test_the_original_shape_still_parses_and_answers() -> None:
    spec = parse_handshake_spec(
        {"when": {"json": "$.kind", "equals": "hello"},
         "respond": {"json": {"echo": "$.value", "fixed": [1, "two"], "gone": "$.missing"}}},
        "p.handshake",
    )
    answer = handshake_answer(spec, b'{"kind":"hello","value":{"a":1}}')
    assert answer is not None
    assert json.loads(answer.body) == {"echo": {"a": 1}, "fixed": [1, "two"], "gone": None}


@pytest.mark.parametrize(
    "data, path",
    [
        ({"when": {"header": "X-Type"}, "respond": {"json": {}}}, "p.when"),
        ({"when": {"header": "X Type", "equals": "a"}, "respond": {"json": {}}}, "p.when.header"),
        ({"when": {"header": "X-Type", "equals": 1}, "respond": {"json": {}}}, "p.when.equals"),
        ({"when": {"json": "$.t", "equals": 1}, "respond": {"text": "$.c", "json": {}}},
         "p.respond"),
        ({"when": {"json": "$.t", "equals": 1}, "respond": {"text": "c"}}, "p.respond.text"),
        ({"when": {"json": "$.t", "equals": 1}, "respond": {"json": {}, "status": 500}},
         "p.respond.status"),
        ({"when": {"json": "$.t", "equals": 1},
          "respond": {"json": {"k": {"hmac_sha256_hex": "nope"}}}},
         "p.respond.json.k.hmac_sha256_hex"),
        ({"when": {"json": "$.t", "equals": 1}, "respond": {"json": {"k": {1, 2}}}},
         "p.respond.json.k"),
    ],
)
def test_bad_handshakes_name_the_key(data: object, path: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_handshake_spec(data, "p")
    assert caught.value.path == path
