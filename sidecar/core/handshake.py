"""Provider handshakes (e.g. Slack ``url_verification``) answered by the proxy itself: never
forwarded, never stored. Evaluated only on a verified body.

Shape (data, as in presets)::

    handshake:
      when: {json: "$.type", equals: url_verification}
      respond: {json: {challenge: "$.challenge"}}   # "$…" strings are copied from the body
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sidecar.core.errors import ConfigError
from sidecar.core.jsonpath import JsonPath, parse_json_path


@dataclass(frozen=True, slots=True)
class HandshakeSpec:
    when_path: JsonPath
    equals: object
    respond: tuple[tuple[str, JsonPath | object], ...]


def parse_handshake_spec(data: object, path: str) -> HandshakeSpec:
    if not isinstance(data, dict) or set(data) != {"when", "respond"}:
        raise ConfigError(path, "must be a mapping with exactly `when` and `respond`")
    when = data["when"]
    if not isinstance(when, dict) or set(when) != {"json", "equals"}:
        raise ConfigError(f"{path}.when", "must be {json: \"$.path\", equals: VALUE}")
    respond = data["respond"]
    if not isinstance(respond, dict) or set(respond) != {"json"} or not isinstance(
            respond["json"], dict):
        raise ConfigError(f"{path}.respond", "must be {json: {key: \"$.path\" or a literal}}")
    fields: list[tuple[str, JsonPath | object]] = []
    for key, value in respond["json"].items():
        if isinstance(value, str) and value.startswith("$"):
            fields.append((str(key), parse_json_path(value, f"{path}.respond.json.{key}")))
        else:
            fields.append((str(key), value))
    return HandshakeSpec(
        when_path=parse_json_path(when["json"], f"{path}.when.json"),
        equals=when["equals"],
        respond=tuple(fields),
    )


def handshake_answer(spec: HandshakeSpec, body: bytes) -> dict[str, Any] | None:
    """The JSON answer if this (verified) body is the handshake, else None."""
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):  # not JSON (or too deep): not a handshake
        return None
    found, value = spec.when_path.lookup(document)
    if not found or value != spec.equals:
        return None
    answer: dict[str, Any] = {}
    for key, source in spec.respond:
        if isinstance(source, JsonPath):
            found, value = source.lookup(document)
            answer[key] = value if found else None
        else:
            answer[key] = source
    return answer
