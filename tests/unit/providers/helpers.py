"""Shared helpers for the provider tests: presets as parsed specs, keys, failure reasons and
the tampering every preset must reject."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from sidecar.config.presets import load_preset
from sidecar.core.errors import VerificationError
from sidecar.core.eventid import EventIdSpec, parse_event_id_spec
from sidecar.core.signing import (
    Delivery,
    SignatureSpec,
    decode_secret,
    parse_signature_spec,
    verify,
)

NOW = 1_760_000_000
PUBLIC_URL = "https://hooks.example.com/webhooks/test"


def preset_spec(name: str, url: str = PUBLIC_URL) -> SignatureSpec:
    """The preset's signature spec; URL-signed schemes get ``url`` as their configured URL."""
    data = load_preset(name)["signature"]
    assert isinstance(data, dict)
    if data.get("plugin") == "twilio" or "{url}" in str(data.get("message", "")):
        data["url"] = url
    return parse_signature_spec(data, f"presets.{name}.signature")


def preset_event_id(name: str) -> EventIdSpec:
    return parse_event_id_spec(load_preset(name)["event_id"], f"presets.{name}.event_id")


def keys_for(spec: SignatureSpec, *secrets: str) -> list[bytes]:
    return [decode_secret(spec, secret, f"secrets[{i}]") for i, secret in enumerate(secrets)]


def reason(spec: SignatureSpec, keys: Sequence[bytes], body: bytes,
           headers: Mapping[str, str], now: float = NOW, **request: str) -> str:
    with pytest.raises(VerificationError) as caught:
        verify(spec, keys, Delivery(body, headers, **request), now)
    return caught.value.reason


def flip(text: str, index: int | None = None) -> str:
    """Change one character of a hex or base64 text to another valid one ("0"/"1" are in both
    alphabets). By default the second-to-last data character: base64's last one may carry
    unused bits."""
    if index is None:
        index = len(text.rstrip("=")) - 2
    replacement = "0" if text[index] != "0" else "1"
    return text[:index] + replacement + text[index + 1 :]


def flip_byte(body: bytes, index: int = 0) -> bytes:
    return body[:index] + bytes([body[index] ^ 0x01]) + body[index + 1 :]


def assert_tampering_fails(
    spec: SignatureSpec, keys: Sequence[bytes], wrong_keys: Sequence[bytes], body: bytes,
    headers: Mapping[str, str], *, signature_header: str, timestamp_header: str | None = None,
    now: float = NOW, **request: str,
) -> None:
    """The delivery verifies; a changed byte of body, signature, timestamp or secret fails."""
    verify(spec, keys, Delivery(body, headers, **request), now)
    assert reason(spec, keys, flip_byte(body), headers, now, **request) == "bad_signature"
    assert reason(spec, keys, body + b" ", headers, now, **request) == "bad_signature"
    signature = headers[signature_header]
    changed = {**headers, signature_header: flip(signature)}
    assert reason(spec, keys, body, changed, now, **request) == "bad_signature"
    assert reason(spec, wrong_keys, body, headers, now, **request) == "bad_signature"
    if timestamp_header is not None:
        stamp = headers[timestamp_header]
        moved = {**headers, timestamp_header: _bump(stamp)}
        assert reason(spec, keys, body, moved, now, **request) == "bad_signature"


def _bump(stamp: str) -> str:
    """The timestamp text with its last digit changed by one (still within tolerance)."""
    i = max(i for i, c in enumerate(stamp) if c.isdigit())
    digit = int(stamp[i])
    return stamp[:i] + str(digit + 1 if digit < 9 else digit - 1) + stamp[i + 1 :]
