"""The JSON Schema of a ``signature`` block (``parse_signature_spec`` in ``sidecar.core``): its
algorithms, encodings, formats and plugins, each with the keys it takes. Part of the blocks
``sidecar.config.schema.nested`` describes; the tests there hold both declarations together."""

from __future__ import annotations

from typing import Final

from sidecar.config.kinds import JSON, choice, ref
from sidecar.core.signing import ALGORITHMS, ENCODINGS, FORMATS, PLUGINS, SECRET_DECODERS


def one_of_keys(*keys: str) -> list[JSON]:
    return [{"required": [key]} for key in keys]


_SEPARATOR: Final = ref("nonempty_string")

# Where a header is read: one name, or alternative names of which the first present is read.
# (The loader also names the key path of a bad entry: ``signature.header[1]``.)
HEADER_NAMES: Final[JSON] = {"anyOf": [
    ref("header_name"),
    {"type": "array", "minItems": 1, "uniqueItems": True, "items": ref("header_name")},
]}

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
    "header": {**HEADER_NAMES, "description": "The header carrying the signature, or a list "
               "of alternative names (the first one present is read; `sign` writes the first)."},
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


def _tagged(tag: str, name: str, keys: dict[str, JSON], required: tuple[str, ...]) -> JSON:
    """A mapping whose ``tag`` key names its variant (``type: kv_list``, ``plugin: twilio``)."""
    return {
        "type": "object",
        "additionalProperties": False,
        "properties": {tag: {"const": name}, **keys},
        "required": [tag, *required],
    }


def _format_schema(name: str) -> JSON:
    return _tagged("type", name, FORMAT_KEYS[name], FORMAT_REQUIRED.get(name, ()))


def _plugin_schema(name: str) -> JSON:
    return _tagged("plugin", name, PLUGIN_KEYS[name], PLUGIN_REQUIRED.get(name, ()))


def signature_defs() -> JSON:
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
        "header": {**HEADER_NAMES, "description": "The header carrying the timestamp, or a "
                   "list of alternative names (the first one present is read)."},
        "from": {"const": "signature",
                 "description": "The timestamp is the format's timestamp_key."},
        "json": {**ref("json_path"), "description": "The timestamp is in the signed JSON body "
                 "at this path (Linear's $.webhookTimestamp); checked once the body verifies."},
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
            "anyOf": [{"type": "null"}, {"oneOf": one_of_keys("header", "from", "json")}],
        },
        "timestamp_override": {
            "type": ["object", "null"],
            "additionalProperties": False,
            "properties": timestamp_keys,
        },
    }


# --- event ids and handshakes -----------------------------------------------------------------
