"""Property tests for the parsers of untrusted input (CONVENTIONS 16): whatever a client puts in
the headers or the body, verification and event-id extraction fail only with their own errors."""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sidecar.config.presets import load_preset, preset_names
from sidecar.core.errors import EventIdError, VerificationError
from sidecar.core.eventid import EventIdSpec, extract_event_id, parse_event_id_spec
from sidecar.core.signing import (
    DeclarativeSpec,
    Delivery,
    SignatureSpec,
    parse_signature_spec,
    sign,
    verify,
)

NOW = 1_700_000_000
KEY = b"property-test-key"
TIMESTAMP_REASONS = {"missing_timestamp", "bad_timestamp", "stale_timestamp", "future_timestamp"}


def spec_of(format_: dict[str, object], *, message: str = "{body}",
            timestamp: dict[str, object] | None = None, encoding: str = "hex") -> SignatureSpec:
    data: dict[str, object] = {
        "algorithm": "hmac-sha256", "header": "Sig", "format": format_,
        "encoding": encoding, "message": message,
    }
    if timestamp is not None:
        data["timestamp"] = timestamp
    return parse_signature_spec(data, "test")


# One spec per parser path: plain with and without prefix, kv_list with its own timestamp
# (seconds and milliseconds, "," and ", "), versioned_list with a timestamp header.
SPECS = {
    "plain": spec_of({"type": "plain"}, encoding="base64"),
    "plain_prefix_ts_header": spec_of(
        {"type": "plain", "prefix": "v0="}, message="v0:{timestamp}:{body}",
        timestamp={"header": "Ts"},
    ),
    "kv_list": spec_of(
        {"type": "kv_list", "signature_keys": ["v1"], "timestamp_key": "t"},
        message="{timestamp}.{body}", timestamp={"from": "signature", "direction": "past"},
    ),
    "kv_list_ms": spec_of(
        {"type": "kv_list", "signature_keys": ["v1", "h1"], "timestamp_key": "t",
         "pair_separator": ", "},
        message="{timestamp}.{body}", timestamp={"from": "signature", "unit": "ms"},
    ),
    "versioned_list": spec_of(
        {"type": "versioned_list", "versions": ["v1"]}, encoding="base64",
        message="{header:Id}.{timestamp}.{body}", timestamp={"header": "Ts"},
    ),
}
PARAMS = pytest.mark.parametrize("name", sorted(SPECS))

# Fragments that steer text into the parsers' interesting branches.
FRAGMENT = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["t", "v1", "v0", "h1", "=", ",", ", ", " ", "v0=", "v1,", "sha256="]),
    st.integers(min_value=-1, max_value=10**20).map(str),
    st.binary(max_size=16).map(lambda raw: raw.hex()),
)
HEADER_TEXT = st.one_of(st.text(), st.lists(FRAGMENT, max_size=12).map("".join))


@PARAMS
@settings(deadline=None)
@given(signature=HEADER_TEXT, timestamp=HEADER_TEXT, msg_id=st.text(), body=st.binary())
def test_arbitrary_header_values_raise_only_verification_error(
    name: str, signature: str, timestamp: str, msg_id: str, body: bytes
) -> None:
    headers = {"Sig": signature, "Ts": timestamp, "Id": msg_id}
    with pytest.raises(VerificationError) as caught:
        verify(SPECS[name], [KEY], Delivery(body, headers), NOW)
    assert caught.value.reason.isidentifier()


@PARAMS
@settings(deadline=None)
@given(headers=st.dictionaries(st.text(), st.text()), now=st.floats(allow_nan=False))
def test_arbitrary_header_mappings_raise_only_verification_error(
    name: str, headers: dict[str, str], now: float
) -> None:
    with pytest.raises(VerificationError):
        verify(SPECS[name], [KEY], Delivery(b"{}", headers), now)


def _fresh_integer(text: str, unit_seconds: float, tolerance: float, past_only: bool) -> bool:
    if not (text.isascii() and text.isdigit() and len(text) <= 18):
        return False
    age = NOW - int(text) * unit_seconds
    return age <= tolerance and (past_only or -age <= tolerance)


TIMESTAMP_TEXT = st.one_of(
    st.text(),
    st.integers(min_value=NOW - 1000, max_value=NOW + 1000).map(str),
    st.integers(min_value=(NOW - 1000) * 1000, max_value=(NOW + 1000) * 1000).map(str),
    st.integers(min_value=0, max_value=NOW).map(lambda n: f" {n}"),
)


def _mac_hex(message: bytes) -> str:
    return hmac.new(KEY, message, hashlib.sha256).hexdigest()


@settings(deadline=None)
@given(text=TIMESTAMP_TEXT, body=st.binary(max_size=64))
def test_timestamp_header_accepted_iff_an_integer_within_tolerance(text: str, body: bytes) -> None:
    spec = SPECS["plain_prefix_ts_header"]
    # Correctly signed for whatever text was sent, so only the timestamp rule can reject it.
    message = b"v0:" + text.encode("utf-8", "surrogatepass") + b":" + body
    headers = {"Sig": "v0=" + _mac_hex(message), "Ts": text}
    if _fresh_integer(text, 1, 300, past_only=False):
        verify(spec, [KEY], Delivery(body, headers), NOW)
    else:
        with pytest.raises(VerificationError) as caught:
            verify(spec, [KEY], Delivery(body, headers), NOW)
        assert caught.value.reason in TIMESTAMP_REASONS


@pytest.mark.parametrize(
    "name, separator, unit, past_only",
    [("kv_list", ",", 1, True), ("kv_list_ms", ", ", 0.001, False)],
)
@settings(deadline=None)
@given(text=TIMESTAMP_TEXT, body=st.binary(max_size=64))
def test_signature_borne_timestamp_accepted_iff_an_integer_within_tolerance(
    name: str, separator: str, unit: float, past_only: bool, text: str, body: bytes
) -> None:
    spec = SPECS[name]
    message = text.encode("utf-8", "surrogatepass") + b"." + body
    headers = {"Sig": f"t={text}{separator}v1={_mac_hex(message)}"}
    if _fresh_integer(text, unit, 300, past_only):
        verify(spec, [KEY], Delivery(body, headers), NOW)
    else:
        with pytest.raises(VerificationError):
            verify(spec, [KEY], Delivery(body, headers), NOW)


ID_TEXT = st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=40)


def round_trip_spec(preset: str) -> SignatureSpec:
    data = load_preset(preset)["signature"]
    assert isinstance(data, dict)
    if "{url}" in str(data.get("message", "")):
        data["url"] = "https://hooks.example.com/webhooks/x"
    return parse_signature_spec(data, preset)


# Presets that MAC the body with a shared secret (public-key, token and plugin schemes have
# their own tests under tests/unit/providers).
ROUND_TRIP = [
    name for name in preset_names()
    if "plugin" not in load_preset(name)["signature"]  # type: ignore[operator]
    and round_trip_spec(name).algorithm.name.startswith("hmac")  # type: ignore[union-attr]
]


def test_round_trip_covers_every_hmac_preset() -> None:
    assert len(ROUND_TRIP) == 20 and {"stripe", "hubspot", "square", "twitch"} <= set(ROUND_TRIP)


@pytest.mark.parametrize("preset", ROUND_TRIP)
@settings(deadline=None, max_examples=50)
@given(key=st.binary(min_size=1, max_size=64), body=st.binary(min_size=1),
       now=st.floats(min_value=0, max_value=4e9), msg_id=ID_TEXT, data=st.data())
def test_sign_then_verify_round_trips_and_any_body_change_fails(
    preset: str, key: bytes, body: bytes, now: float, msg_id: str, data: st.DataObject
) -> None:
    spec = round_trip_spec(preset)
    if isinstance(spec, DeclarativeSpec) and spec.timestamp and spec.timestamp.json:
        # Linear: the timestamp is a field of the (JSON) body; any byte of it may change.
        body = json.dumps({"webhookTimestamp": math.floor(now * 1000),
                           "data": body.decode("latin-1")}).encode()
    given_headers = {"webhook-id": msg_id, "svix-id": msg_id, "Twitch-Eventsub-Message-Id": msg_id}
    headers = {**given_headers, **sign(spec, key, Delivery(body, given_headers), now)}
    verify(spec, [b"another key", key], Delivery(body, headers), now)
    index = data.draw(st.integers(min_value=0, max_value=len(body) - 1))
    changed = body[:index] + bytes([body[index] ^ 0x01]) + body[index + 1 :]
    with pytest.raises(VerificationError) as caught:
        verify(spec, [key], Delivery(changed, headers), now)
    assert caught.value.reason == "bad_signature"


# --- event ids -------------------------------------------------------------------------------

JSON_SPEC = parse_event_id_spec({"json": "$.data['object-id'].items[1]", "max_length": 40}, "t")
HEADER_SPEC = parse_event_id_spec({"header": "X-Event-Id", "max_length": 40}, "t")

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.sampled_from(["data", "object-id", "items", "x"]) | st.text(),
                      children, max_size=4),
    max_leaves=20,
)


def _assert_usable_or_event_id_error(
    spec: EventIdSpec, body: bytes, headers: dict[str, str]
) -> None:
    try:
        value = extract_event_id(spec, body, headers)
    except EventIdError as exc:
        assert exc.reason in {"missing_event_id", "invalid_json", "invalid_event_id"}
        return
    assert isinstance(value, str)
    assert value.strip() and len(value) <= 40
    assert not any(unicodedata.category(char) in ("Cc", "Cs") for char in value)


@settings(deadline=None)
@given(body=st.binary())
def test_arbitrary_bodies_give_an_id_or_event_id_error(body: bytes) -> None:
    _assert_usable_or_event_id_error(JSON_SPEC, body, {})


@settings(deadline=None)
@given(document=JSON_VALUES, leaf=JSON_VALUES)
def test_arbitrary_json_gives_an_id_or_event_id_error(document: object, leaf: object) -> None:
    for doc in (document, {"data": {"object-id": {"items": [None, leaf]}}}):
        body = json.dumps(doc, allow_nan=True).encode()
        _assert_usable_or_event_id_error(JSON_SPEC, body, {})


@settings(deadline=None)
@given(value=st.text(min_size=1, max_size=40))
def test_a_clean_string_id_comes_back_unchanged(value: str) -> None:
    body = json.dumps({"data": {"object-id": {"items": ["x", value]}}}).encode()
    clean = value.strip() and not any(
        unicodedata.category(char) in ("Cc", "Cs", "Zl", "Zp") for char in value
    )
    if clean:
        assert extract_event_id(JSON_SPEC, body, {}) == value
    else:
        with pytest.raises(EventIdError):
            extract_event_id(JSON_SPEC, body, {})


@settings(deadline=None)
@given(headers=st.dictionaries(st.sampled_from(["X-Event-Id", "x-event-id"]) | st.text(),
                               st.text()))
def test_arbitrary_headers_give_an_id_or_event_id_error(headers: dict[str, str]) -> None:
    _assert_usable_or_event_id_error(HEADER_SPEC, b"", headers)
