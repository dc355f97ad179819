"""Readers for the fields of a configuration block that the core parses itself (a
``signature:``, ``event_id:``, ``handshake:`` or plugin block): each returns the value or raises
a ``ConfigError`` naming the key path, so a mistake is reported where it was written.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit

from sidecar.core.errors import ConfigError

_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # an HTTP header name (RFC 9110 token)


def is_header_name(text: str) -> bool:
    return _TOKEN.fullmatch(text) is not None


def join_path(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def as_mapping(data: object, path: str) -> Mapping[str, object]:
    if not isinstance(data, Mapping):
        raise ConfigError(path, "must be a mapping")
    for key in data:
        if not isinstance(key, str):
            raise ConfigError(path, f"keys must be strings, got {key!r}")
    return data


def check_keys(
    data: Mapping[str, object],
    path: str,
    *,
    required: Iterable[str] = (),
    optional: Iterable[str] = (),
    context: str = "",
) -> None:
    """Reject unknown keys first (typos are the common mistake), then missing ones."""
    required = tuple(required)
    allowed = (*required, *optional)
    for key in data:
        if key not in allowed:
            raise ConfigError(
                join_path(path, key), f"unknown key{context}; allowed: {', '.join(allowed)}"
            )
    for key in required:
        if key not in data:
            raise ConfigError(join_path(path, key), "required")


def get_str(
    data: Mapping[str, object],
    key: str,
    path: str,
    default: str | None = None,
    *,
    allow_empty: bool = False,
) -> str:
    value = data.get(key, default)
    where = join_path(path, key)
    if value is None:
        raise ConfigError(where, "required")
    if not isinstance(value, str):
        raise ConfigError(where, "must be a string")
    if not value and not allow_empty:
        raise ConfigError(where, "must not be empty")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ConfigError(where, "must be valid Unicode text") from None
    return value


def get_choice(
    data: Mapping[str, object], key: str, path: str, choices: Iterable[str], default: str | None
) -> str:
    choices = tuple(choices)
    value = data.get(key, default)
    if value is None:
        raise ConfigError(join_path(path, key), "required")
    if not isinstance(value, str) or value not in choices:
        raise ConfigError(join_path(path, key), f"must be one of {', '.join(choices)}")
    return value


def get_header_name(data: Mapping[str, object], key: str, path: str) -> str:
    value = get_str(data, key, path)
    if not is_header_name(value):
        raise ConfigError(join_path(path, key), f"{value!r} is not a valid HTTP header name")
    return value


def get_header_names(data: Mapping[str, object], key: str, path: str) -> tuple[str, ...]:
    """A header name, or a non-empty list of alternative names: the first one present in a
    request is the one read (a provider that sends the same value under a new name)."""
    value = data.get(key)
    where = join_path(path, key)
    if isinstance(value, str):
        return (get_header_name(data, key, path),)
    if not isinstance(value, list) or not value:
        raise ConfigError(where, "must be a header name or a non-empty list of header names "
                          "(the first one present is read)")
    names: list[str] = []
    for index, item in enumerate(value):
        at = f"{where}[{index}]"
        if not isinstance(item, str):
            raise ConfigError(at, "must be a header name (a string)")
        if not is_header_name(item):
            raise ConfigError(at, f"{item!r} is not a valid HTTP header name")
        if item in names:
            raise ConfigError(at, f"repeats {where}[{names.index(item)}]")
        names.append(item)
    return tuple(names)


def get_str_list(data: Mapping[str, object], key: str, path: str) -> tuple[str, ...]:
    value = data.get(key)
    where = join_path(path, key)
    if not isinstance(value, list) or not value:
        raise ConfigError(where, "must be a non-empty list of strings")
    for index, item in enumerate(value):
        if not isinstance(item, str) or not item:
            raise ConfigError(f"{where}[{index}]", "must be a non-empty string")
    return tuple(value)


def parse_public_url(data: Mapping[str, object], key: str, path: str) -> str:
    """An absolute http(s) URL without credentials or fragment, kept verbatim: it is signed."""
    text = get_str(data, key, path)
    where = join_path(path, key)
    try:
        parts = urlsplit(text)
    except ValueError:
        raise ConfigError(where, "is not a valid URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(where, "must be the absolute http(s) URL the provider calls, e.g. "
                          "${PUBLIC_URL}/webhooks/square")
    if "@" in parts.netloc or parts.fragment or any(char.isspace() for char in text):
        raise ConfigError(where, "must not contain credentials, a #fragment or whitespace")
    try:
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        raise ConfigError(where, "has an invalid port") from None
    return text
