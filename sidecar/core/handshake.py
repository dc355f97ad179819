"""Provider handshakes answered by the proxy itself: never forwarded, never stored. Evaluated
only on a verified delivery.

Shape (data, as in presets)::

    handshake:
      when: {json: "$.type", equals: url_verification}      # or {header: Name, equals: text}
      respond:
        json: {challenge: "$.challenge"}     # "$…" strings are copied from the body;
                                             # {hmac_sha256_hex: "$.path"}: hex HMAC-SHA256 of
                                             # that body value with the first configured key
        # or  text: "$.challenge"            # the body value itself, as text/plain
        status: 200                          # optional

Examples: Slack ``url_verification`` (``{challenge}``), Zoom ``endpoint.url_validation``
(``{plainToken, encryptedToken}``), Twitch ``webhook_callback_verification`` (the raw
challenge as text/plain), Discord PING (``{"type": 1}``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sidecar.core.body import Body, JsonValue, NotJson
from sidecar.core.errors import ConfigError
from sidecar.core.fields import get_header_name
from sidecar.core.headers import header_value
from sidecar.core.jsonpath import JsonPath, parse_json_path

JSON_TYPE = "application/json"
TEXT_TYPE = "text/plain; charset=utf-8"


@dataclass(frozen=True, slots=True)
class HmacHex:
    """``{hmac_sha256_hex: "$.path"}``: hex HMAC-SHA256 of a body string, first key."""

    source: JsonPath


@dataclass(frozen=True, slots=True)
class HandshakeSpec:
    when_path: JsonPath | None
    equals: JsonValue
    respond: tuple[tuple[str, JsonPath | HmacHex | object], ...] = ()
    text: JsonPath | None = None  # respond with this body value as text/plain
    when_header: str | None = None
    status: int = 200


@dataclass(frozen=True, slots=True)
class HandshakeAnswer:
    """What the proxy sends back: status, the full Content-Type header value, the body."""

    status: int
    content_type: str
    body: bytes


def _same(value: object, expected: object) -> bool:
    # JSON true is not 1: a bool only equals a bool.
    return isinstance(value, bool) == isinstance(expected, bool) and value == expected


def _parse_when(when: object, path: str) -> tuple[JsonPath | None, str | None, object]:
    shape = '{json: "$.path", equals: VALUE} or {header: Name, equals: TEXT}'
    if not isinstance(when, dict) or len(when) != 2 or "equals" not in when:
        raise ConfigError(path, f"must be {shape}")
    if "json" in when:
        return parse_json_path(when["json"], f"{path}.json"), None, when["equals"]
    if "header" in when:
        if not isinstance(when["equals"], str):
            raise ConfigError(f"{path}.equals", "must be a string (header values are text)")
        return None, get_header_name(when, "header", path), when["equals"]
    raise ConfigError(path, f"must be {shape}")


def _parse_value(value: object, path: str) -> JsonPath | HmacHex | object:
    if isinstance(value, str) and value.startswith("$"):
        return parse_json_path(value, path)
    if isinstance(value, dict) and set(value) == {"hmac_sha256_hex"}:
        return HmacHex(parse_json_path(value["hmac_sha256_hex"], f"{path}.hmac_sha256_hex"))
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        raise ConfigError(path, "must be a JSON value, a \"$.path\" or "
                          "{hmac_sha256_hex: \"$.path\"}") from None
    return value


def parse_handshake_spec(data: object, path: str) -> HandshakeSpec:
    if not isinstance(data, dict) or set(data) != {"when", "respond"}:
        raise ConfigError(path, "must be a mapping with exactly `when` and `respond`")
    when_path, when_header, equals = _parse_when(data["when"], f"{path}.when")
    respond = data["respond"]
    shape = "must be {json: {key: \"$.path\" or a literal}} or {text: \"$.path\"}"
    if not isinstance(respond, dict) or not respond.keys() <= {"json", "text", "status"} or (
        ("json" in respond) == ("text" in respond)
    ):
        raise ConfigError(f"{path}.respond", shape)
    status = respond.get("status", 200)
    if isinstance(status, bool) or not isinstance(status, int) or not 200 <= status <= 299:
        raise ConfigError(f"{path}.respond.status", "must be a 2xx status")
    if "text" in respond:
        return HandshakeSpec(when_path, equals, (),
                             parse_json_path(respond["text"], f"{path}.respond.text"),
                             when_header, status)
    if not isinstance(respond["json"], dict):
        raise ConfigError(f"{path}.respond.json", shape)
    fields = tuple(
        (str(key), _parse_value(value, f"{path}.respond.json.{key}"))
        for key, value in respond["json"].items()
    )
    return HandshakeSpec(when_path, equals, fields, None, when_header, status)


def _document(body: Body) -> tuple[bool, object]:
    try:
        return True, body.json()
    except NotJson:
        return False, None


def _refuse(reason: str) -> HandshakeAnswer:
    body = json.dumps({"error": "malformed handshake", "reason": reason}).encode()
    return HandshakeAnswer(400, JSON_TYPE, body)


def handshake_answer(
    spec: HandshakeSpec,
    body: Body | bytes,
    headers: Mapping[str, str] | None = None,
    keys: Sequence[bytes] = (),
) -> HandshakeAnswer | None:
    """The answer if this (verified) delivery is the handshake, else None (deliver it).

    A handshake that lacks what its answer needs (a challenge that is not a string, no key
    for an HMAC) gets a 400 answer: it is still never forwarded."""
    body = Body.of(body)
    parsed, document = False, None
    if spec.when_header is not None:
        if header_value(headers or {}, spec.when_header) != spec.equals:
            return None
    else:
        assert spec.when_path is not None
        parsed, document = _document(body)
        if not parsed:
            return None
        found, marker = spec.when_path.lookup(document)
        if not found or not _same(marker, spec.equals):
            return None
    if not parsed:
        parsed, document = _document(body)
        if not parsed:
            return _refuse("body is not JSON")

    if spec.text is not None:
        found, value = spec.text.lookup(document)
        if not found or not isinstance(value, str):
            return _refuse(f"no string at {spec.text.text}")
        try:
            return HandshakeAnswer(spec.status, TEXT_TYPE, value.encode("utf-8"))
        except UnicodeEncodeError:
            return _refuse(f"{spec.text.text} is not valid text")

    answer: dict[str, Any] = {}
    for key, source in spec.respond:
        if isinstance(source, JsonPath):
            found, value = source.lookup(document)
            answer[key] = value if found else None
        elif isinstance(source, HmacHex):
            found, value = source.source.lookup(document)
            if not found or not isinstance(value, str) or not keys:
                return _refuse(f"cannot compute {key}")
            try:
                message = value.encode("utf-8")
            except UnicodeEncodeError:
                return _refuse(f"{source.source.text} is not valid text")
            answer[key] = hmac.new(keys[0], message, hashlib.sha256).hexdigest()
        else:
            answer[key] = source
    return HandshakeAnswer(spec.status, JSON_TYPE, json.dumps(answer).encode("utf-8"))
