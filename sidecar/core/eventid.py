"""The provider's stable event id: from a header or a small JSON-path subset of the body.

Called only after the signature is verified, so the body is trusted to be the provider's,
but it is still parsed defensively: every failure is an ``EventIdError``.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass

from sidecar.core.errors import ConfigError, EventIdError
from sidecar.core.jsonpath import JsonPath, parse_json_path
from sidecar.core.signing.spec import as_mapping, check_keys, get_header_name, get_str, join_path
from sidecar.core.signing.verify import header_value

# Control characters, lone surrogates (not valid UTF-8) and line/paragraph separators.
_FORBIDDEN = frozenset(("Cc", "Cs", "Zl", "Zp"))


@dataclass(frozen=True, slots=True)
class EventIdSpec:
    source: str  # the header name, or the JSON path as written
    header: str | None = None
    json_path: JsonPath | None = None
    max_length: int = 255

    def __post_init__(self) -> None:
        if (self.header is None) == (self.json_path is None):
            raise ValueError("EventIdSpec needs exactly one of header and json_path")


def parse_event_id_spec(data: object, path: str) -> EventIdSpec:
    """``{header: Name}`` or ``{json: "$.path"}``, optional ``max_length`` (default 255)."""
    mapping = as_mapping(data, path)
    check_keys(mapping, path, optional=("header", "json", "max_length"))
    max_length = mapping.get("max_length", 255)
    if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 1:
        raise ConfigError(join_path(path, "max_length"), "must be a positive integer")
    if "header" in mapping and "json" in mapping:
        raise ConfigError(join_path(path, "json"), "give header or json, not both")
    if "header" in mapping:
        name = get_header_name(mapping, "header", path)
        return EventIdSpec(name, header=name, max_length=max_length)
    if "json" in mapping:
        text = get_str(mapping, "json", path)
        return EventIdSpec(text, json_path=parse_json_path(text, join_path(path, "json")),
                           max_length=max_length)
    raise ConfigError(join_path(path, "header"), 'required (or json: "$.path")')


def _checked(spec: EventIdSpec, value: str) -> str:
    # The id becomes a database key, a log field and an upstream header value.
    if not value.strip():
        raise EventIdError("invalid_event_id", "empty")
    if len(value) > spec.max_length:
        raise EventIdError("invalid_event_id", f"longer than {spec.max_length}")
    if any(unicodedata.category(char) in _FORBIDDEN for char in value):
        raise EventIdError("invalid_event_id", "contains control characters")
    return value


def extract_event_id(spec: EventIdSpec, body: bytes, headers: Mapping[str, str]) -> str:
    """Return the event id; raise ``EventIdError`` (``missing_event_id``, ``invalid_json``,
    ``invalid_event_id``). Integers become their decimal text; ``null`` counts as missing."""
    if spec.header is not None:
        value = header_value(headers, spec.header)
        if value is None:
            raise EventIdError("missing_event_id", f"no {spec.header} header")
        return _checked(spec, value)
    assert spec.json_path is not None  # __post_init__ guarantees one source
    try:
        document = json.loads(body.decode("utf-8"))
    except (ValueError, RecursionError):  # bad UTF-8 / JSON, too many digits, too deep
        raise EventIdError("invalid_json", "body is not JSON") from None
    found, node = spec.json_path.lookup(document)
    if not found or node is None:
        raise EventIdError("missing_event_id", f"nothing at {spec.source}")
    if isinstance(node, int) and not isinstance(node, bool):
        return _checked(spec, str(node))
    if not isinstance(node, str):
        raise EventIdError("invalid_event_id", f"{spec.source} is not a string or integer")
    return _checked(spec, node)
