"""Event-id extraction: header or JSON-path subset, with the id's validity rules."""

from __future__ import annotations

import pytest

from sidecar.core.errors import ConfigError, EventIdError
from sidecar.core.eventid import EventIdSpec, extract_event_id, parse_event_id_spec


def json_spec(path: str, max_length: int = 255) -> EventIdSpec:
    return parse_event_id_spec({"json": path, "max_length": max_length}, "p.event_id")


def reason(spec: EventIdSpec, body: bytes, headers: dict[str, str] | None = None) -> str:
    with pytest.raises(EventIdError) as caught:
        extract_event_id(spec, body, headers or {})
    return caught.value.reason


@pytest.mark.parametrize(
    "path, body, expected",
    [
        ("$.id", b'{"id": "evt_1"}', "evt_1"),
        ("$.a.b", b'{"a": {"b": "x"}}', "x"),
        ("$['event-data'].id", b'{"event-data": {"id": "md_1"}}', "md_1"),
        ('$["a.b"]', b'{"a.b": "dotted"}', "dotted"),
        ("$.items[0].id", b'{"items": [{"id": "first"}, {"id": "second"}]}', "first"),
        ("$.items[1].id", b'{"items": [{"id": "first"}, {"id": "second"}]}', "second"),
        ("$.event_id", b'{"event_id": "Ev08MFMKH6", "type": "event_callback"}', "Ev08MFMKH6"),
        ("$.id", b'{"id": 12345678901234567890}', "12345678901234567890"),
        ("$.id", b'{"id": -7}', "-7"),
        ("$.id", '{"id": "caf\u00e9-\u2603"}'.encode(), "caf\u00e9-\u2603"),
        ("$.id", b'{"id": "a", "id": "b"}', "b"),  # duplicate keys: json's last-wins
    ],
)
def test_json_path_finds_the_id(path: str, body: bytes, expected: str) -> None:
    assert extract_event_id(json_spec(path), body, {}) == expected


@pytest.mark.parametrize(
    "path, body",
    [
        ("$.id", b'{"other": 1}'),
        ("$.id", b'{"id": null}'),
        ("$.id", b"[1, 2]"),
        ("$.a.b", b'{"a": "not an object"}'),
        ("$.items[2]", b'{"items": [1, 2]}'),
        ("$.items[0]", b'{"items": {"0": "x"}}'),
    ],
)
def test_missing_id(path: str, body: bytes) -> None:
    assert reason(json_spec(path), body) == "missing_event_id"


@pytest.mark.parametrize(
    "body",
    [
        b'{"id": true}',
        b'{"id": 1.5}',
        b'{"id": {"nested": 1}}',
        b'{"id": ["x"]}',
        b'{"id": ""}',
        b'{"id": "   "}',
        b'{"id": "line\\nbreak"}',
        b'{"id": "nul\\u0000"}',
        b'{"id": "del\\u007f"}',
        b'{"id": "c1\\u0085"}',
        b'{"id": "sep\\u2028"}',
        b'{"id": "lone\\ud800"}',
        b'{"id": "' + b"x" * 256 + b'"}',
        b'{"id": 1' + b"0" * 255 + b"}",
    ],
)
def test_invalid_id(body: bytes) -> None:
    assert reason(json_spec("$.id"), body) == "invalid_event_id"


def test_max_length_is_inclusive() -> None:
    spec = json_spec("$.id", max_length=3)
    assert extract_event_id(spec, b'{"id": "abc"}', {}) == "abc"
    assert reason(spec, b'{"id": "abcd"}') == "invalid_event_id"
    assert reason(spec, b'{"id": 1234}') == "invalid_event_id"


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"not json",
        b'{"id": "evt_1"',
        b"\xff\xfe{}",
        b'\xef\xbb\xbf{"id": "bom"}',
        b"[" * 100_000 + b"]" * 100_000,  # deep nesting must not escape as RecursionError
        b'{"id": ' + b"9" * 5000 + b"}",  # beyond int's digit limit
        b'{"id": "x"}'.decode().encode("utf-16"),
    ],
)
def test_invalid_json(body: bytes) -> None:
    assert reason(json_spec("$.id"), body) == "invalid_json"


def test_header_source_is_case_insensitive_and_validated() -> None:
    spec = parse_event_id_spec({"header": "X-GitHub-Delivery"}, "p.event_id")
    guid = "72d3162e-cc78-11e3-81ab-4c9367dc0958"
    assert extract_event_id(spec, b"ignored", {"X-GitHub-Delivery": guid}) == guid
    assert extract_event_id(spec, b"", {"x-github-delivery": guid}) == guid
    assert reason(spec, b"", {"X-GitHub-Event": "push"}) == "missing_event_id"
    assert reason(spec, b"", {"X-GitHub-Delivery": ""}) == "invalid_event_id"
    assert reason(spec, b"", {"X-GitHub-Delivery": "a\tb"}) == "invalid_event_id"
    # aiohttp gives undecodable header bytes as surrogate escapes: not a usable id.
    assert reason(spec, b"", {"X-GitHub-Delivery": "\udcff"}) == "invalid_event_id"


def test_header_source_does_not_parse_the_body() -> None:
    spec = parse_event_id_spec({"header": "webhook-id"}, "p")
    assert extract_event_id(spec, b"\xff not json", {"webhook-id": "msg_1"}) == "msg_1"


# --- spec parsing ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data, path",
    [
        ("$.id", "p.event_id"),
        ({}, "p.event_id.header"),
        ({"header": "A", "json": "$.id"}, "p.event_id.json"),
        ({"jsonpath": "$.id"}, "p.event_id.jsonpath"),
        ({"header": 5}, "p.event_id.header"),
        ({"header": "Bad Header"}, "p.event_id.header"),
        ({"json": ""}, "p.event_id.json"),
        ({"json": "id"}, "p.event_id.json"),
        ({"json": "$"}, "p.event_id.json"),
        ({"json": "$.a..b"}, "p.event_id.json"),
        ({"json": "$.a[*]"}, "p.event_id.json"),
        ({"json": "$.a[-1]"}, "p.event_id.json"),
        ({"json": "$['unterminated]"}, "p.event_id.json"),
        ({"json": "$.id", "max_length": 0}, "p.event_id.max_length"),
        ({"json": "$.id", "max_length": "255"}, "p.event_id.max_length"),
        ({"json": "$.id", "max_length": True}, "p.event_id.max_length"),
    ],
)
def test_bad_specs_name_the_key(data: object, path: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_event_id_spec(data, "p.event_id")
    assert caught.value.path == path


def test_spec_defaults_and_steps() -> None:
    spec = parse_event_id_spec({"json": "$.items[0]['a-b'].c"}, "p")
    assert spec.json_path is not None
    assert spec.json_path.steps == ("items", 0, "a-b", "c")
    assert spec.max_length == 255
    assert spec.header is None


def test_spec_needs_exactly_one_source_when_built_directly() -> None:
    with pytest.raises(ValueError):
        EventIdSpec("x")
