"""The JSON Schema of the blocks ``sidecar.core`` parses — ``signature``, ``event_id``,
``handshake`` — and of their preset overrides.

Unlike the keys declared on the model (``sidecar.config.model``), these are declared twice:
here, and by their parsers in ``sidecar.core`` (``parse_signature_spec``,
``parse_event_id_spec``, ``parse_handshake_spec``). Tests hold the two together: the registries
(algorithms, encodings, formats, plugins) are compared, and every invalid case is rejected by
both.
"""

from __future__ import annotations

from sidecar.config.kinds import JSON, ref
from sidecar.config.schema.signature import HEADER_NAMES, one_of_keys, signature_defs


def _event_id_defs() -> JSON:
    part: JSON = {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "header": HEADER_NAMES,
            "json": ref("json_path"),
            "optional": {"type": "boolean", "default": False,
                         "description": "An absent optional part contributes ''."},
        },
        "oneOf": one_of_keys("header", "json"),
    }
    sources: JSON = {
        "header": {**HEADER_NAMES, "description": "The id is this header's value; with a list "
                   "of alternative names, the first one present."},
        "json": {**ref("json_path"), "description": "The id is this body value."},
        "composite": {
            "description": "Several parts joined with ':' (at least one not optional).",
            "type": "array",
            "minItems": 2,
            "items": part,
            "contains": {"not": {"properties": {"optional": {"const": True}},
                                 "required": ["optional"]}},
        },
        "max_length": {"type": "integer", "minimum": 1, "default": 255,
                       "description": "Longer ids are rejected (400)."},
    }
    batch: JSON = {
        "description": "A body carrying several events, each claimed on its own.",
        "type": "object",
        "additionalProperties": False,
        "properties": {"items": ref("json_path_items"), "item_id": ref("event_id_item")},
        "required": ["items", "item_id"],
    }
    return {
        "event_id": {
            "description": "The provider's stable event id (the same on every retry).",
            "type": "object",
            "additionalProperties": False,
            "properties": {**sources, "batch": batch},
            "oneOf": one_of_keys("header", "json", "composite", "batch"),
        },
        "event_id_item": {
            "type": "object",
            "additionalProperties": False,
            "properties": sources,
            "oneOf": one_of_keys("header", "json", "composite"),
        },
        "event_id_override": {
            "description": "Merged over the preset's event_id block; one naming its own "
                           "source (header, json, composite, batch) replaces it.",
            "type": "object",
            "additionalProperties": False,
            "properties": {**sources, "batch": batch},
        },
    }


def _handshake_defs() -> JSON:
    respond_value: JSON = {
        "anyOf": [
            {"type": "string", "not": {"pattern": "^\\$"}},
            ref("json_path"),
            {"type": "object", "additionalProperties": False, "required": ["hmac_sha256_hex"],
             "properties": {"hmac_sha256_hex": ref("json_path")}},
            {"type": "object", "not": {"required": ["hmac_sha256_hex"],
                                       "maxProperties": 1}},
            {"type": ["number", "boolean", "null", "array"]},
        ],
    }
    when: JSON = {
        "description": "Which verified delivery is the handshake.",
        "oneOf": [
            {"type": "object", "additionalProperties": False, "required": ["json", "equals"],
             "properties": {"json": ref("json_path"), "equals": {}}},
            {"type": "object", "additionalProperties": False, "required": ["header", "equals"],
             "properties": {"header": ref("header_name"), "equals": {"type": "string"}}},
        ],
    }
    respond_keys: JSON = {
        "json": {"type": "object", "additionalProperties": respond_value,
                 "description": "A JSON answer: \"$.path\" copies a body value, "
                 "{hmac_sha256_hex: \"$.path\"} signs one, anything else is literal."},
        "text": {**ref("json_path"), "description": "Answer with this body value as text."},
        "status": {"type": "integer", "minimum": 200, "maximum": 299, "default": 200},
    }
    return {
        "handshake": {
            "description": "A provider handshake the proxy answers itself (never forwarded).",
            "type": ["object", "null"],
            "additionalProperties": False,
            "properties": {
                "when": when,
                "respond": {"type": "object", "additionalProperties": False,
                            "properties": respond_keys,
                            "oneOf": one_of_keys("json", "text")},
            },
            "anyOf": [{"type": "null"}, {"required": ["when", "respond"]}],
        },
        "handshake_override": {
            "description": "Merged over the preset's handshake block; one with its own "
                           "`when` replaces it.",
            "type": ["object", "null"],
            "additionalProperties": False,
            "properties": {
                "when": {"type": "object", "additionalProperties": False,
                         "properties": {"json": ref("json_path"),
                                        "header": ref("header_name"), "equals": {}}},
                "respond": {"type": "object", "additionalProperties": False,
                            "properties": respond_keys},
            },
        },
    }


def nested_defs() -> JSON:
    """The ``$defs`` of the signature, event id and handshake blocks."""
    return {**signature_defs(), **_event_id_defs(), **_handshake_defs()}
