"""The JSON Schema of the value types the kinds name by ``$ref`` (``sidecar.config.kinds``):
what the loader's parsers accept, as patterns and bounds."""

from __future__ import annotations

from typing import Final

from sidecar.config.kinds import JSON, ref, text

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


def _duration(description: str, bound: JSON, digits: str) -> JSON:
    """Seconds within ``bound``, or ``digits`` with a unit (``ms``, ``s``, ``m``, ``h``, ``d``)."""
    return {
        "description": description,
        "anyOf": [
            {"type": "number", **bound, "maximum": _MAX_FLOAT},
            {"type": "string", "pattern": rf"^\s*{digits}\s*{_UNIT}\s*$"},
            ref("interpolated"),
        ],
    }


VALUE_DEFS: Final[JSON] = {
    "interpolated": {
        "description": "A string holding ${VAR} or ${VAR:-default}, checked after "
        "interpolation from the environment.",
        "type": "string",
        "pattern": r"\$\{[A-Za-z_][A-Za-z0-9_]*(?::-[^}]*)?\}",
    },
    "duration": _duration("A duration: 500ms, 10s, 5m, 2h, 3d or a number of seconds (not "
                          "negative).", {"minimum": 0}, r"[0-9]+(?:\.[0-9]+)?"),
    "positive_duration": _duration("A duration more than zero: 500ms, 10s, 5m, 2h, 3d or "
                                   "seconds.", {"exclusiveMinimum": 0}, _DIGITS_POSITIVE),
    "size_or_zero": {
        "description": "A size, or 0 for off: bytes, or 512KiB, 1MiB, 1MB, 1GiB …",
        "anyOf": [
            {"type": "integer", "minimum": 0},
            {"type": "string",
             "pattern": r"^\s*[0-9]+\s*(?:B|KB|KiB|MB|MiB|GB|GiB)?\s*$"},
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
        "description": "sqlite:///PATH (relative to the config file's folder), "
        "postgresql://user:pass@host:5432/db or mysql://user:pass@host:3306/db "
        "(mariadb:// alike).",
        "type": "string",
        "pattern": r"^(?:sqlite:///[\s\S]+|[Pp][Oo][Ss][Tt][Gg][Rr][Ee][Ss](?:[Qq][Ll])?://"
        r"[\s\S]*|(?:[Mm][Yy][Ss][Qq][Ll]|[Mm][Aa][Rr][Ii][Aa][Dd][Bb])://[^/?#]*/[^/?#]+"
        r"(?:\?[\s\S]*)?)$",
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
