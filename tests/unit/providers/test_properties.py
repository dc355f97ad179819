"""Property tests over every parser of untrusted input that the presets use (CONVENTIONS 16):
whatever arrives — header values, bodies, methods, query strings, undecodable bytes —
verification fails only with ``VerificationError``, event-id extraction only with
``EventIdError``, and a handshake check never raises."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sidecar.config.presets import load_preset, preset_names
from sidecar.core.errors import EventIdError, VerificationError
from sidecar.core.eventid import delivery_items
from sidecar.core.handshake import handshake_answer, parse_handshake_spec
from sidecar.core.signing import (
    FORMATS,
    DeclarativeSpec,
    Delivery,
    PluginSpec,
    SignatureSpec,
    decode_secret,
    verify,
)
from sidecar.core.signing.timestamps import parse_rfc3339

from .helpers import NOW, preset_event_id, preset_spec

ED25519_PUBLIC = bytes.fromhex("03a107bff3ce10be1d70dd18e74bc09967e4d6309ba50d5f1ddc8664125531b8")
P256_SPKI = ("MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE83T4O/n84iotIvIW4mdBgQ/7dAfSmpqIM8kF9mN1flpVKS3G"
             "Rqe62gw+2fNNRaINXvVpiglSI8eNEc6wEA3F+g==")


def preset_keys(name: str, spec: SignatureSpec) -> list[bytes]:
    secrets = {
        "discord": [ED25519_PUBLIC.hex()],
        "sendgrid": [P256_SPKI],
        "standard-webhooks": ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
                              "whpk_" + base64.b64encode(ED25519_PUBLIC).decode()],
        "svix": ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"],
        "clerk": ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"],
        "resend": ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"],
        "adyen": ["44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056"],
    }.get(name, ["a-shared-secret"])
    return [decode_secret(spec, secret, "k") for secret in secrets]


def header_names(spec: SignatureSpec) -> list[str]:
    """The headers a preset's verifier reads."""
    if isinstance(spec, PluginSpec):
        return ["X-Twilio-Signature", "X-Twilio-Webhooks-Signature-Settings"]
    names = [spec.header]
    if spec.timestamp is not None and spec.timestamp.header is not None:
        names.append(spec.timestamp.header)
    names += [part.name for part in spec.message.parts if part.kind == "header"]
    return names


PRESETS = {name: preset_spec(name) for name in preset_names()}
KEYS = {name: preset_keys(name, spec) for name, spec in PRESETS.items()}

# Text that reaches the parsers' branches: separators, prefixes, versions, digits, hex,
# base64, RFC 3339 pieces, and undecodable bytes as aiohttp delivers them (surrogate escapes).
FRAGMENT = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["t=", "v1=", "v1,", "v1a,", "h1=", "ts=", "sha256=", "sha1=", "v0=", ",",
                     ";", " ", ", ", "=", "Z", "T", ".", ":", "+00:00", "-", "algorithm=",
                     "HMAC_SHA256", "whpk_"]),
    st.integers(min_value=-1, max_value=10**20).map(str),
    st.integers(min_value=NOW - 400, max_value=NOW + 400).map(str),
    st.binary(max_size=70).map(bytes.hex),
    st.binary(max_size=70).map(lambda raw: base64.b64encode(raw).decode()),
    st.binary(max_size=8).map(lambda raw: raw.decode("utf-8", "surrogateescape")),
)
HEADER_TEXT = st.one_of(st.text(), st.lists(FRAGMENT, max_size=10).map("".join))
BODIES = st.one_of(
    st.binary(max_size=200),
    st.text(max_size=100).map(str.encode),
    st.lists(FRAGMENT, max_size=10).map(lambda parts: "&".join(parts).encode("utf-8", "replace")),
)


@pytest.mark.parametrize("name", sorted(PRESETS))
@settings(deadline=None, max_examples=60)
@given(data=st.data(), body=BODIES, method=st.sampled_from(["POST", "GET", "PUT", "\udcff"]),
       query=HEADER_TEXT, now=st.floats(allow_nan=True, allow_infinity=True))
def test_every_preset_raises_only_verification_error(
    name: str, data: st.DataObject, body: bytes, method: str, query: str, now: float
) -> None:
    spec = PRESETS[name]
    names = st.sampled_from(header_names(spec)) | st.text(max_size=8)
    headers = data.draw(st.dictionaries(names, HEADER_TEXT, max_size=4))
    with pytest.raises(VerificationError) as caught:
        verify(spec, KEYS[name], Delivery(body, headers, method=method, query=query), now)
    assert caught.value.reason.isidentifier()


# JSON documents shaped like the body-signed schemes, with arbitrary values in every slot.
JSON_LEAF = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=20),
                      st.text(max_size=4).map(lambda t: t + "\ud800"))
JSON_VALUE = st.recursive(JSON_LEAF, lambda inner: st.lists(inner, max_size=3)
                          | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=8)
ADYEN_ITEM = st.fixed_dictionaries({}, optional={
    field: JSON_VALUE for field in ("pspReference", "originalReference", "merchantAccountCode",
                                    "merchantReference", "eventCode", "success")
} | {"amount": st.one_of(JSON_VALUE, st.fixed_dictionaries({"value": JSON_VALUE,
                                                            "currency": JSON_VALUE})),
     "additionalData": st.one_of(JSON_VALUE, st.fixed_dictionaries(
         {"hmacSignature": st.one_of(JSON_VALUE, FRAGMENT)}))})
ADYEN_BODY = st.fixed_dictionaries({"notificationItems": st.one_of(
    JSON_VALUE, st.lists(st.one_of(JSON_VALUE, st.fixed_dictionaries(
        {"NotificationRequestItem": st.one_of(JSON_VALUE, ADYEN_ITEM)})), max_size=3))})
MAILGUN_BODY = st.fixed_dictionaries({"signature": st.one_of(JSON_VALUE, st.fixed_dictionaries(
    {}, optional={"timestamp": st.one_of(JSON_VALUE, FRAGMENT), "token": JSON_VALUE,
                  "signature": st.one_of(JSON_VALUE, FRAGMENT)}))})


@pytest.mark.parametrize("name, documents", [("adyen", ADYEN_BODY), ("mailgun", MAILGUN_BODY)])
@settings(deadline=None, max_examples=150)
@given(data=st.data())
def test_body_signed_schemes_raise_only_verification_error(
    name: str, documents: st.SearchStrategy[object], data: st.DataObject
) -> None:
    body = json.dumps(data.draw(documents), allow_nan=True).encode("utf-8", "surrogatepass")
    with pytest.raises(VerificationError):
        verify(PRESETS[name], KEYS[name], Delivery(body, {}), NOW)


# The header formats on their own, in every configuration the presets use.
FORMAT_CONFIGS = [
    {"type": "plain"}, {"type": "plain", "prefix": "sha256="},
    {"type": "kv_list", "signature_keys": ["v1"], "timestamp_key": "t"},
    {"type": "kv_list", "signature_keys": ["h1"], "timestamp_key": "ts", "pair_separator": ";"},
    {"type": "kv_list", "signature_keys": ["v1"], "timestamp_key": "t", "pair_separator": ", "},
    {"type": "kv_list", "signature_keys": ["sha256"]},
    {"type": "versioned_list", "versions": ["v1", "v1a"], "algorithms": {"v1a": "ed25519"}},
]


@pytest.mark.parametrize("config", FORMAT_CONFIGS, ids=lambda c: str(sorted(c.items())))
@settings(deadline=None)
@given(value=HEADER_TEXT)
def test_header_formats_parse_or_raise_verification_error(
    config: dict[str, object], value: str
) -> None:
    fmt = FORMATS[str(config["type"])](config, "f")
    try:
        parts = fmt.parse(value)
    except VerificationError:
        return
    assert all(isinstance(text, str) and text for text in parts.signatures)
    assert not parts.labels or len(parts.labels) == len(parts.signatures)


@settings(deadline=None)
@given(text=st.one_of(HEADER_TEXT, st.datetimes().map(lambda d: d.isoformat() + "Z")))
def test_rfc3339_parses_or_raises_verification_error(text: str) -> None:
    try:
        assert isinstance(parse_rfc3339(text), float)
    except VerificationError as exc:
        assert exc.reason == "bad_timestamp"


EVENT_PRESETS = ["adyen", "hubspot", "sendgrid", "zoom", "lemonsqueezy", "mailgun"]


@pytest.mark.parametrize("name", EVENT_PRESETS)
@settings(deadline=None, max_examples=80)
@given(document=st.one_of(JSON_VALUE, ADYEN_BODY, st.lists(JSON_VALUE, max_size=3)),
       raw=st.binary(max_size=40))
def test_event_ids_are_usable_or_event_id_error(name: str, document: object, raw: bytes) -> None:
    spec = preset_event_id(name)
    for body in (json.dumps(document).encode(), raw):
        try:
            found = [i.event_id for i in delivery_items(spec, body, {})]
        except EventIdError:
            continue
        assert found and all(isinstance(i, str) and i.strip() for i in found)


HANDSHAKES = {name: parse_handshake_spec(load_preset(name)["handshake"], name)
              for name in ("slack", "zoom", "twitch", "discord")}


@pytest.mark.parametrize("name", sorted(HANDSHAKES))
@settings(deadline=None, max_examples=80)
@given(document=JSON_VALUE, raw=st.binary(max_size=40),
       headers=st.dictionaries(st.sampled_from(["Twitch-Eventsub-Message-Type"]) | st.text(),
                               st.sampled_from(["webhook_callback_verification"]) | st.text()))
def test_handshake_check_never_raises(
    name: str, document: object, raw: bytes, headers: dict[str, str]
) -> None:
    for body in (json.dumps(document).encode("utf-8", "surrogatepass"), raw):
        answer = handshake_answer(HANDSHAKES[name], body, headers, [b"k"])
        assert answer is None or answer.status in (200, 400)


def test_the_property_suite_covers_every_preset_and_scheme_kind() -> None:
    assert len(PRESETS) == 26
    kinds = {type(spec).__name__ for spec in PRESETS.values()}
    assert kinds == {"DeclarativeSpec", "PluginSpec"}
    algorithms = {spec.algorithm.name for spec in PRESETS.values()
                  if isinstance(spec, DeclarativeSpec)}
    assert algorithms == {"hmac-sha256", "hmac-sha1", "ed25519", "ecdsa-p256-sha256", "token"}
