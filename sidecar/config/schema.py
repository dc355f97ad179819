"""The JSON Schema (draft 2020-12) of the YAML configuration, built from one declarative
description of the keys the loader accepts.

The schema serves editors (completion and checking through ``# yaml-language-server:
$schema=…``) and CI; the loader stays the authority at start-up. The two are held together by
tests: every config the schema rejects, the loader rejects too, and the key sets, defaults and
registries (algorithms, encodings, formats, plugins, presets) below are compared with the
loader's. What a JSON Schema cannot express — comparisons between keys (a lease longer than
``upstream.timeout``), the environment and the file system (secrets set and readable), duplicate
provider paths, the result of merging a block over its preset — is checked by the loader only;
``LOADER_ONLY_RULES`` lists those rules and ``docs/configuration.md`` documents them.

Every string value may hold ``${VAR}`` / ``${VAR:-default}``: the loader interpolates before it
validates, so the schema accepts any string that contains such a reference where a constrained
string is expected, and leaves the interpolated value to the loader.

Regenerate the committed files after changing the description::

    python -m sidecar.config.schema --write
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from sidecar.config.presets import preset_names
from sidecar.core.signing import ALGORITHMS, ENCODINGS, FORMATS, PLUGINS, SECRET_DECODERS

JSON = dict[str, Any]

SCHEMA_DIALECT: Final = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_FILE: Final = "webhook-sidecar.schema.json"
REFERENCE_DOC: Final = "docs/configuration.md"
REFERENCE_BEGIN: Final = (
    "<!-- BEGIN GENERATED: config keys (python -m sidecar.config.schema --write) -->")
REFERENCE_END: Final = "<!-- END GENERATED: config keys -->"

LOADER_ONLY_RULES: Final[tuple[str, ...]] = (
    "a value written as ${VAR} is checked after interpolation (an unset variable without a "
    "default is an error)",
    "admin_listen must differ from listen (unless the port is 0)",
    "store.pool_min_size must not exceed store.pool_max_size",
    "providers.<key>.path must be unique across providers",
    "providers.<key>.lease must exceed upstream.timeout (for a batch provider, upstream.timeout "
    "+ inflight_wait); inflight_wait must not exceed the lease; retention must exceed the lease",
    "secrets: {env: NAME} must be set, {file: PATH} must be readable and not empty, and each "
    "secret must decode with the scheme's secret encoding (base64, hex, key prefixes)",
    "a block given next to a preset is merged over the preset first (an event_id with its own "
    "source, a signature.format of another type, and a handshake with its own when replace "
    "the preset's "
    "whole), and the merged block is checked (e.g. prefix added to a kv_list format)",
    "signature: {timestamp} in the message if and only if a timestamp is set; timestamp "
    "{from: signature} needs a format with timestamp_key, and timestamp_key needs it; {url} in "
    "the message if and only if url is set; append_query needs {url}; separators must differ "
    "and not contain each other; timestamp_key is not a signature key; format.algorithms names "
    "listed versions; at most one public-key algorithm; public_key_prefix when a scheme mixes "
    "shared secrets and public keys",
    "signature url: the port must be a valid number",
    "an integer key (sizes in bytes, pool sizes, statuses, max_length) written as a float such "
    "as 100.0 (a JSON Schema integer; the loader wants a YAML integer)",
    "numbers that do not fit a float (1e400 as text) are not durations",
)


class _NoDefault:
    def __repr__(self) -> str:
        return "NO_DEFAULT"


NO_DEFAULT: Final = _NoDefault()


@dataclass(frozen=True, slots=True)
class Key:
    """One key of a mapping: the JSON Schema of its value, a line of documentation, its
    default as written in YAML (``NO_DEFAULT`` when it has none) and a short type label for
    the reference tables."""

    value: JSON
    doc: str
    kind: str
    default: object = NO_DEFAULT
    required: bool = False


@dataclass(frozen=True, slots=True)
class Block:
    """A mapping with a fixed set of keys (unknown keys are errors, as in the loader).
    ``nullable``: an empty ``key:`` means "all defaults"."""

    doc: str
    keys: Mapping[str, Key]
    nullable: bool = False
    extra: JSON = field(default_factory=dict)

    def schema(self) -> JSON:
        properties = {}
        for name, key in self.keys.items():
            prop = dict(key.value)
            prop["description"] = key.doc
            if key.default is not NO_DEFAULT:
                prop["default"] = key.default
            properties[name] = prop
        out: JSON = {
            "type": ["object", "null"] if self.nullable else "object",
            "description": self.doc,
            "additionalProperties": False,
            "properties": properties,
        }
        required = [name for name, key in self.keys.items() if key.required]
        if required:
            out["required"] = required
        out.update(self.extra)
        return out


def ref(name: str) -> JSON:
    return {"$ref": f"#/$defs/{name}"}


def text(schema: JSON) -> JSON:
    """A constrained string that may instead hold a ``${VAR}`` reference."""
    return {"anyOf": [schema, ref("interpolated")]}


def choice(values: list[str]) -> JSON:
    return text({"enum": values})


def one_of_keys(*keys: str) -> list[JSON]:
    return [{"required": [key]} for key in keys]


# --- the value types --------------------------------------------------------------------------

_MAX_FLOAT = 1.7976931348623157e308
_DIGITS_POSITIVE = r"(?:[0-9]*[1-9][0-9]*(?:\.[0-9]+)?|[0-9]+\.[0-9]*[1-9][0-9]*)"
_UNIT = r"(?:ms|s|m|h|d)?"
_PORT = r"0*(?:6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[0-9]{1,4})"
_TOKEN = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"  # an HTTP header name (RFC 9110 token)
_STEP = r"""(?:\.[A-Za-z0-9_-]+|\[[0-9]+\]|\['[^'\n]*'\]|\["[^"\n]*"\])"""
_WILD = r"\[\*\]"
_HTTP = r"[Hh][Tt][Tt][Pp][Ss]?://"
_PLACEHOLDER = (
    rf"[^{{}}]|\{{\{{|\}}\}}|\{{(?:body|timestamp|url|method|header:{_TOKEN})\}}"
)

DEFS: Final[JSON] = {
    "interpolated": {
        "description": "A string holding ${VAR} or ${VAR:-default}, checked after "
        "interpolation from the environment.",
        "type": "string",
        "pattern": r"\$\{[A-Za-z_][A-Za-z0-9_]*(?::-[^}]*)?\}",
    },
    "duration": {
        "description": "A duration: 500ms, 10s, 5m, 2h, 3d or a number of seconds (not "
        "negative).",
        "anyOf": [
            {"type": "number", "minimum": 0, "maximum": _MAX_FLOAT},
            {"type": "string", "pattern": rf"^\s*[0-9]+(?:\.[0-9]+)?\s*{_UNIT}\s*$"},
            ref("interpolated"),
        ],
    },
    "positive_duration": {
        "description": "A duration more than zero: 500ms, 10s, 5m, 2h, 3d or seconds.",
        "anyOf": [
            {"type": "number", "exclusiveMinimum": 0, "maximum": _MAX_FLOAT},
            {"type": "string", "pattern": rf"^\s*{_DIGITS_POSITIVE}\s*{_UNIT}\s*$"},
            ref("interpolated"),
        ],
    },
    "size": {
        "description": "A size more than zero: bytes, or 512KiB, 1MiB, 1MB, 1GiB …",
        "anyOf": [
            {"type": "integer", "minimum": 1},
            {"type": "string",
             "pattern": r"^\s*0*[1-9][0-9]*\s*(?:B|KB|KiB|MB|MiB|GB|GiB)?\s*$"},
            ref("interpolated"),
        ],
    },
    "address": text({
        "description": "HOST:PORT, e.g. 0.0.0.0:8080 or [::1]:9090; port 0 picks a free one.",
        "type": "string",
        "pattern": rf"^[\s\S]*[^\[\]][\s\S]*:{_PORT}$",
    }),
    "upstream_url": text({
        "description": "The app: an http:// or https:// URL.",
        "type": "string",
        "pattern": rf"^{_HTTP}[^/?#\s]+",
    }),
    "store_url": text({
        "description": "sqlite:///PATH (relative to the config file's folder) or "
        "postgresql://user:pass@host:5432/db.",
        "type": "string",
        "pattern": r"^(?:sqlite:///[\s\S]+|[Pp][Oo][Ss][Tt][Gg][Rr][Ee][Ss](?:[Qq][Ll])?://"
        r"[\s\S]*)$",
    }),
    "public_url": text({
        "description": "The absolute http(s) URL the provider calls (it is signed), without "
        "credentials, #fragment or whitespace.",
        "type": "string",
        "pattern": rf"^{_HTTP}(?:[^/?#@\s:\[][^/?#@\s]*|\[[^\]/?#@\s]+\][^/?#@\s]*)"
        r"(?:[/?][^#\s]*)?$",
    }),
    "header_name": text({
        "description": "An HTTP header name.",
        "type": "string",
        "pattern": rf"^{_TOKEN}$",
    }),
    "json_path": text({
        "description": "A JSON path selecting one value: $.a.b, $['a-b'].c, $.items[0].id.",
        "type": "string",
        "pattern": rf"^\${_STEP}+$",
    }),
    "json_path_items": text({
        "description": "A JSON path selecting the items of a batch with [*], e.g. $[*].",
        "type": "string",
        "pattern": rf"^\$(?:{_STEP}|{_WILD})*{_WILD}(?:{_STEP}|{_WILD})*$",
    }),
    "message_template": text({
        "description": "What is signed: literal text with {body} (required), {timestamp}, "
        "{header:Name}, {url}, {method}; {{ and }} are literal braces.",
        "type": "string",
        "pattern": rf"^(?:{_PLACEHOLDER})*\{{body\}}(?:{_PLACEHOLDER})*$",
    }),
    "nonempty_string": {"type": "string", "minLength": 1},
    "string_list": {
        "type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1},
    },
    "secret": {
        "description": "A secret inline (better from ${VAR}), {env: NAME} or {file: PATH} "
        "(Kubernetes Secret volumes; re-read when the file changes).",
        "anyOf": [
            {"type": "string", "minLength": 1},
            {
                "type": "object",
                "additionalProperties": False,
                "minProperties": 1,
                "maxProperties": 1,
                "properties": {
                    "env": {"type": "string", "minLength": 1,
                            "description": "An environment variable holding the secret."},
                    "file": {"type": "string", "minLength": 1,
                             "description": "A file holding the secret (a trailing newline is "
                             "ignored); relative to the config file's folder."},
                },
            },
        ],
    },
    "secrets": {
        "description": "The provider's secrets; every one is accepted at once (rotation).",
        "anyOf": [
            ref("secret"),
            {"type": "array", "minItems": 1, "items": ref("secret")},
        ],
    },
    "statuses": {
        "description": "Statuses (429) or classes ('5xx'); never a 2xx.",
        "type": "array",
        "items": {
            "anyOf": [
                {"type": "integer", "minimum": 100, "maximum": 599},
                {"type": "string", "pattern": "^[1-5]xx$"},
                ref("interpolated"),
            ],
        },
        "not": {"contains": {"anyOf": [
            {"const": "2xx"}, {"type": "integer", "minimum": 200, "maximum": 299},
        ]}},
    },
}


# --- signature blocks -----------------------------------------------------------------------

_SEPARATOR: Final = ref("nonempty_string")

# One entry per registered header format (``FORMATS``): its keys besides ``type``.
FORMAT_KEYS: Final[dict[str, dict[str, JSON]]] = {
    "plain": {
        "prefix": {"type": "string", "description": "A literal prefix, e.g. sha256= or v0=."},
    },
    "kv_list": {
        "signature_keys": {**ref("string_list"),
                           "description": "Keys whose values are signatures, e.g. [v1]."},
        "pair_separator": {**_SEPARATOR, "default": ","},
        "kv_separator": {**_SEPARATOR, "default": "="},
        "timestamp_key": {"anyOf": [ref("nonempty_string"), {"type": "null"}],
                          "description": "The key carrying the signed timestamp, e.g. t."},
    },
    "versioned_list": {
        "versions": {**ref("string_list"),
                     "description": "Accepted versions, e.g. [v1, v1a]."},
        "list_separator": {**_SEPARATOR, "default": " "},
        "version_separator": {**_SEPARATOR, "default": ","},
        "algorithms": {
            "description": "An algorithm per version, where it differs from `algorithm`.",
            "type": ["object", "null"],
            "additionalProperties": choice(sorted(ALGORITHMS)),
        },
    },
}
FORMAT_REQUIRED: Final[dict[str, tuple[str, ...]]] = {
    "kv_list": ("signature_keys",), "versioned_list": ("versions",),
}

# One entry per registered plugin (``PLUGINS``): its keys besides ``plugin``, and the required.
PLUGIN_KEYS: Final[dict[str, dict[str, JSON]]] = {
    "twilio": {
        "url": ref("public_url"),
        "algorithm": choice(["auto", "hmac-sha1", "hmac-sha256"]),
        "secret": ref("plugin_secret"),
    },
    "adyen": {"secret": ref("plugin_secret")},
    "mailgun": {"secret": ref("plugin_secret"), "tolerance": ref("positive_duration")},
}
PLUGIN_REQUIRED: Final[dict[str, tuple[str, ...]]] = {"twilio": ("url",)}

SIGNATURE_KEYS: Final[dict[str, JSON]] = {
    "algorithm": {**choice(sorted(ALGORITHMS)), "description": "How the message is signed."},
    "header": {**ref("header_name"), "description": "The header carrying the signature."},
    "format": {"description": "How the header value is laid out."},
    "encoding": {**choice(sorted(ENCODINGS)), "description": "Text form of the signature."},
    "message": {"anyOf": [ref("message_template"), {"type": "null"}],
                "description": "What is signed (not used by algorithm token)."},
    "secret": {**ref("secret_spec"), "description": "How a configured secret becomes key "
               "bytes."},
    "timestamp": {**ref("timestamp"), "description": "The signed timestamp and its tolerance."},
    "url": {"anyOf": [ref("public_url"), {"type": "null"}],
            "description": "The public URL the provider calls, when the message signs {url}."},
    "append_query": {"type": ["boolean", "null"], "default": False,
                     "description": "{url} also carries ? and the request's query string."},
}
_TOKEN_UNUSED: Final = ("message", "timestamp", "url", "append_query")


def _format_schema(name: str) -> JSON:
    return {
        "type": "object",
        "additionalProperties": False,
        "properties": {"type": {"const": name}, **FORMAT_KEYS[name]},
        "required": ["type", *FORMAT_REQUIRED.get(name, ())],
    }


def _plugin_schema(name: str) -> JSON:
    return {
        "type": "object",
        "additionalProperties": False,
        "properties": {"plugin": {"const": name}, **PLUGIN_KEYS[name]},
        "required": ["plugin", *PLUGIN_REQUIRED.get(name, ())],
    }


def _signature_defs() -> JSON:
    declarative: JSON = {
        "type": "object",
        "description": "A signature scheme described by data.",
        "additionalProperties": False,
        "properties": {**SIGNATURE_KEYS, "format": {"oneOf": [
            _format_schema(name) for name in FORMATS
        ]}},
        "required": ["algorithm", "header", "format"],
        "if": {"properties": {"algorithm": {"const": "token"}}},
        "then": {
            "description": "algorithm token: the header is the shared token itself.",
            "properties": {key: {"type": "null"} for key in _TOKEN_UNUSED},
        },
        "else": {
            "required": ["encoding", "message"],
            "properties": {"message": ref("message_template"),
                           "append_query": {"type": "boolean"}},
        },
    }
    override_format: JSON = {
        "type": "object",
        "additionalProperties": False,
        "properties": {"type": choice(sorted(FORMATS))},
    }
    for keys in FORMAT_KEYS.values():
        override_format["properties"].update(keys)
    override: JSON = {
        "type": "object",
        "description": "Keys merged over the preset's signature block.",
        "additionalProperties": False,
        "properties": {**SIGNATURE_KEYS, "format": override_format,
                       "plugin": choice(sorted(PLUGINS)),
                       "algorithm": choice(sorted({*ALGORITHMS, "auto"})),
                       "secret": {"anyOf": [ref("secret_spec"), ref("plugin_secret")]},
                       "timestamp": ref("timestamp_override"),
                       "tolerance": ref("positive_duration")},
    }
    timestamp_keys: JSON = {
        "header": {**ref("header_name"), "description": "The header carrying the timestamp."},
        "from": {"const": "signature",
                 "description": "The timestamp is the format's timestamp_key."},
        "unit": {**choice(["s", "ms", "rfc3339"]), "default": "s"},
        "tolerance": {**ref("positive_duration"), "default": 300,
                      "description": "The largest accepted clock difference."},
        "direction": {**choice(["both", "past"]), "default": "both",
                      "description": "both: too old and too new are rejected; past: only "
                      "too old."},
    }
    return {
        "signature": {"oneOf": [
            declarative,
            {"description": "A named plugin for schemes data cannot describe.",
             "oneOf": [_plugin_schema(name) for name in PLUGINS]},
        ]},
        "signature_override": override,
        "secret_spec": {
            "type": ["object", "null"],
            "additionalProperties": False,
            "properties": {
                "encoding": {**choice(sorted(SECRET_DECODERS)), "default": "utf8"},
                "strip_prefix": {"type": "string", "default": ""},
                "public_key_prefix": {"type": "string", "default": ""},
                "private_key_prefix": {"type": "string", "default": ""},
            },
        },
        "plugin_secret": {
            "type": ["object", "null"],
            "additionalProperties": False,
            "properties": {"encoding": choice(sorted(SECRET_DECODERS))},
        },
        "timestamp": {
            "type": ["object", "null"],
            "additionalProperties": False,
            "properties": timestamp_keys,
            "anyOf": [{"type": "null"}, {"oneOf": one_of_keys("header", "from")}],
        },
        "timestamp_override": {
            "type": ["object", "null"],
            "additionalProperties": False,
            "properties": timestamp_keys,
        },
    }


# --- event ids and handshakes -----------------------------------------------------------------

def _event_id_defs() -> JSON:
    part: JSON = {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "header": ref("header_name"),
            "json": ref("json_path"),
            "optional": {"type": "boolean", "default": False,
                         "description": "An absent optional part contributes ''."},
        },
        "oneOf": one_of_keys("header", "json"),
    }
    sources: JSON = {
        "header": {**ref("header_name"), "description": "The id is this header's value."},
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


# --- the mappings the loader reads ------------------------------------------------------------

UPSTREAM: Final = Block("The app the proxy forwards to.", {
    "url": Key(ref("upstream_url"), "The app, http://… or https://…; the request's path and "
               "query are appended.", "URL", required=True),
    "timeout": Key(ref("duration"), "Total time for the app's answer (504 past it); every "
                   "provider's lease must exceed it.", "duration", "10s"),
    "connect_timeout": Key(ref("duration"), "Time to connect to the app.", "duration", "2s"),
    "max_connections": Key({"type": "integer", "minimum": 1}, "Connection pool to the app.",
                           "integer ≥ 1", 100),
    "keepalive_timeout": Key(ref("duration"), "Idle pooled connections are closed after it; "
                             "keep it below the app server's idle timeout.", "duration", "4s"),
    "max_response_bytes": Key(ref("size"), "The app's response body is read up to this size: "
                              "longer ones are cut, in the answer to the provider and in the "
                              "copy kept for replay.", "size", "64KiB"),
})

STORE: Final = Block("Where event rows live.", {
    "url": Key(ref("store_url"), "sqlite:///PATH (one host only; a relative PATH is relative to "
               "the config file's folder) or postgresql://… (any number of replicas).", "URL",
               "sqlite:///./webhook-sidecar.db"),
    "pool_min_size": Key({"type": "integer", "minimum": 0}, "PostgreSQL pool: connections "
                         "kept open.", "integer ≥ 0", 1),
    "pool_max_size": Key({"type": "integer", "minimum": 1}, "PostgreSQL pool: at most this "
                         "many connections.", "integer ≥ 1", 10),
    "acquire_timeout": Key(ref("duration"), "Waiting for a pooled connection (503 past it).",
                           "duration", "2s"),
    "statement_timeout": Key(ref("duration"), "Server-side bound on each statement.",
                             "duration", "5s"),
    "lock_timeout": Key(ref("duration"), "Server-side bound on waiting for a row lock.",
                        "duration", "2s"),
    "statement_cache_size": Key({"type": "integer", "minimum": 0}, "Prepared statements "
                                "cached per connection; 0 behind pgbouncer in transaction "
                                "mode.", "integer ≥ 0", 100),
    "session_settings": Key({"type": "boolean"}, "Send statement_timeout, lock_timeout and "
                            "idle_in_transaction_session_timeout as connection startup "
                            "parameters. Set false behind pgbouncer (it refuses them; set them "
                            "with ALTER ROLE instead).", "boolean", True),
}, nullable=True)

LOG: Final = Block("Logging.", {
    "level": Key(choice(["debug", "info", "warning", "error"]), "Lowest level logged.",
                 "debug | info | warning | error", "info"),
    "format": Key(choice(["auto", "json", "console"]), "auto: JSON unless on a TTY.",
                  "auto | json | console", "auto"),
}, nullable=True)

MAINTENANCE: Final = Block("Background work of each proxy process.", {
    "interval": Key(ref("positive_duration"), "How often retention runs and the stuck-row "
                    "gauge is refreshed.", "duration > 0", "60s"),
    "retention_batch_size": Key({"type": "integer", "minimum": 1}, "Rows deleted per "
                                "retention statement.", "integer ≥ 1", 500),
    "secrets_reload_interval": Key(ref("positive_duration"), "How often secret files are "
                                   "checked for changes (rotation without a restart).",
                                   "duration > 0", "10s"),
}, nullable=True)

PROVIDER: Final = Block("One provider route; its key is part of the dedupe key.", {
    "path": Key(text({"type": "string", "pattern": "^/[^{]*$"}), "The route, a literal URL "
                "path such as /webhooks/stripe; unique across providers.", "path",
                required=True),
    "preset": Key({"anyOf": [{"enum": preset_names()}, ref("interpolated"), {"type": "null"}]},
                  "A shipped scheme (signature, event id, retention); keys given here are "
                  "merged over it.", "preset name"),
    "description": Key({"type": "string"}, "Free text.", "text"),
    "secrets": Key(ref("secrets"), "A list; each a string, {env: NAME} or {file: PATH}; all "
                   "are accepted at once (rotation).", "list", required=True),
    "lease": Key(ref("duration"), "How long an attempt owns the event; must exceed "
                 "upstream.timeout.", "duration", "60s"),
    "inflight_wait": Key(ref("duration"), "How long a duplicate waits for the in-flight "
                         "outcome before 409 (presets vary); at most the lease.", "duration",
                         "5s"),
    "retention": Key(ref("duration"), "How long event rows are kept (presets: the "
                     "provider's retry window plus margin); must exceed the lease.",
                     "duration", "7d"),
    "retry_window": Key({"anyOf": [ref("duration"), {"type": "null"}]}, "How long the "
                        "provider retries (from the preset); a shorter retention is warned "
                        "about.", "duration"),
    "max_body_bytes": Key(ref("size"), "Larger bodies get 413 (default: the top-level "
                          "max_body_bytes).", "size"),
    "retryable_statuses": Key(ref("statuses"), "App answers that leave the event failed "
                              "(retried on redelivery).", "list",
                              ["3xx", 408, 425, 429, "5xx"]),
    "on_payload_mismatch": Key(choice(["duplicate", "reject"]), "Same id, different body: "
                               "answer as the duplicate it claims to be, or 422.",
                               "duplicate | reject", "duplicate"),
    "store_payload": Key({"type": "boolean"}, "Keep the first request on the row, so an "
                         "operator can re-drive it.", "boolean", False),
    "signature": Key({}, "The signature scheme (from the preset, or declared here).",
                     "mapping"),
    "event_id": Key({}, "Where the stable event id is: {header: Name}, {json: \"$.id\"}, "
                    "{composite: [...]} or {batch: {...}}.", "mapping"),
    "handshake": Key({}, "A handshake the proxy answers itself (e.g. Slack "
                     "url_verification).", "mapping"),
    "replay_nonce": Key({"anyOf": [ref("event_id_item"), {"type": "null"}]}, "For schemes that "
                        "sign a nonce but not the body (Mailgun): where the nonce is, as "
                        "{header: …} or {json: …}. The first body seen with a nonce is bound to "
                        "it; another body with the same nonce gets 401.", "mapping"),
}, extra={
    "if": {"required": ["preset"], "properties": {"preset": {"type": "string"}}},
    "then": {"properties": {
        "signature": ref("signature_override"),
        "event_id": ref("event_id_override"),
        "handshake": ref("handshake_override"),
    }},
    "else": {
        "required": ["signature", "event_id"],
        "properties": {
            "signature": ref("signature"),
            "event_id": ref("event_id"),
            "handshake": ref("handshake"),
        },
    },
})

TOP: Final = Block("webhook-sidecar configuration.", {
    "listen": Key(ref("address"), "Provider-facing listener: provider routes only.",
                  "HOST:PORT", "0.0.0.0:8080"),
    "admin_listen": Key(ref("address"), "/healthz, /readyz, /metrics and the admin API; never "
                        "on listen. In Kubernetes use 0.0.0.0:9090 so probes and Prometheus "
                        "reach it.", "HOST:PORT", "127.0.0.1:9090"),
    "admin_token": Key({"anyOf": [{"type": "string", "minLength": 16}, ref("interpolated"),
                                  {"type": "null"}]},
                       "When set, required by the admin API (/admin/*) as a bearer token; at "
                       "least 16 characters.", "string"),
    "max_body_bytes": Key(ref("size"), "Larger bodies get 413 (per-provider override).",
                          "size", "1MiB"),
    "body_read_timeout": Key(ref("duration"), "How long a sender may take to send a request "
                             "body; slower requests get 408.", "duration", "10s"),
    "shutdown_timeout": Key(ref("duration"), "On SIGTERM, how long in-flight deliveries may "
                            "take to finish and record; keep it below Kubernetes "
                            "terminationGracePeriodSeconds.", "duration", "30s"),
    "upstream": Key(UPSTREAM.schema(), UPSTREAM.doc, "mapping", required=True),
    "store": Key(STORE.schema(), STORE.doc, "mapping"),
    "log": Key(LOG.schema(), LOG.doc, "mapping"),
    "maintenance": Key(MAINTENANCE.schema(), MAINTENANCE.doc, "mapping"),
    "providers": Key({
        "type": "object",
        "minProperties": 1,
        "propertyNames": {"pattern": "^[a-z0-9][a-z0-9_-]{0,62}$"},
        "additionalProperties": ref("provider"),
    }, "Provider routes by key (lower-case letters, digits, - and _; at most 63).", "mapping",
        required=True),
})

BLOCKS: Final[dict[str, Block]] = {
    "": TOP, "upstream": UPSTREAM, "store": STORE, "log": LOG, "maintenance": MAINTENANCE,
    "providers.<key>": PROVIDER,
}


def build_schema() -> JSON:
    """The whole JSON Schema document (deterministic: same input, same output)."""
    defs: JSON = {**DEFS, **_signature_defs(), **_event_id_defs(), **_handshake_defs()}
    defs["provider"] = PROVIDER.schema()
    schema: JSON = {
        "$schema": SCHEMA_DIALECT,
        "$comment": "Generated by `python -m sidecar.config.schema --write` from "
        "sidecar/config/schema.py; do not edit by hand.",
        "title": "webhook-sidecar configuration",
    }
    schema.update(TOP.schema())
    schema["$defs"] = dict(sorted(defs.items()))
    return schema


def schema_text() -> str:
    return json.dumps(build_schema(), indent=2, ensure_ascii=False) + "\n"


# --- the reference tables in docs/configuration.md --------------------------------------------

def _cell(value: object) -> str:
    if value is NO_DEFAULT:
        return "—"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, list):
        return "`" + json.dumps(value) + "`"
    return f"`{value}`"


def reference_markdown() -> str:
    """One table per mapping: key, type, default, meaning (generated, kept in the docs)."""
    lines: list[str] = [REFERENCE_BEGIN, ""]
    for prefix, block in BLOCKS.items():
        title = f"`{prefix}`" if prefix else "top level"
        lines += [f"#### {title}", "", block.doc, "", "| key | type | default | meaning |",
                  "|---|---|---|---|"]
        for name, key in block.keys.items():
            full = f"{prefix}.{name}" if prefix else name
            required = " (required)" if key.required else ""
            doc, kind = (text.replace("|", "\\|") for text in (key.doc, key.kind))
            lines.append(f"| `{full}`{required} | {kind} | {_cell(key.default)} | {doc} |")
        lines.append("")
    lines += ["#### Checked by the loader only", "",
              "The schema accepts these; `check-config` and the proxy reject them:", ""]
    lines += [f"- {rule}" for rule in LOADER_ONLY_RULES]
    lines += ["", REFERENCE_END]
    return "\n".join(lines) + "\n"


def replace_reference(document: str) -> str:
    """``document`` with its generated section replaced by the current tables."""
    start = document.index(REFERENCE_BEGIN)
    end = document.index(REFERENCE_END) + len(REFERENCE_END) + 1
    return document[:start] + reference_markdown() + document[end:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sidecar.config.schema",
        description="Print the config JSON Schema, or write it and the docs' reference tables.")
    parser.add_argument("--write", action="store_true",
                        help=f"write {SCHEMA_FILE} and the tables in {REFERENCE_DOC} "
                        "under --root")
    parser.add_argument("--root", default=".", help="the repository root (default: .)")
    args = parser.parse_args(argv)
    if not args.write:
        sys.stdout.write(schema_text())
        return 0
    root = Path(args.root)
    (root / SCHEMA_FILE).write_text(schema_text(), encoding="utf-8")
    doc = root / REFERENCE_DOC
    doc.write_text(replace_reference(doc.read_text(encoding="utf-8")), encoding="utf-8")
    print(f"wrote {root / SCHEMA_FILE} and {doc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
