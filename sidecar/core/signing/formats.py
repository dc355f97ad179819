"""Signature header formats (``FORMATS``, the ``signature.format`` block): how one header value
holds the signatures (and, for some, the timestamp), parsed when verifying and rendered when
signing. A new format is a class and one entry."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from sidecar.core.errors import ConfigError, VerificationError
from sidecar.core.fields import as_mapping, check_keys, get_choice, get_str, get_str_list, join_path
from sidecar.core.signing.algorithms import ALGORITHMS


@dataclass(frozen=True, slots=True)
class HeaderParts:
    """What a signature header holds: candidate signatures (still encoded) and, for formats
    that carry one, the timestamp text exactly as received. ``labels`` (versioned lists only)
    holds each signature's version, which may select its algorithm."""

    signatures: tuple[str, ...]
    timestamp: str | None = None
    labels: tuple[str, ...] = ()


class SignatureFormat(Protocol):
    @property
    def carries_timestamp(self) -> bool: ...

    def parse(self, value: str) -> HeaderParts:
        """Split a header value; raises only ``VerificationError``."""
        ...

    def render(self, signature: str, timestamp: str | None, label: str | None = None) -> str:
        """The header value for one signature; ``label`` picks a version (versioned lists)."""
        ...


@dataclass(frozen=True, slots=True)
class PlainFormat:
    """One signature, optionally behind a literal prefix (``sha256=…``, ``v0=…``)."""

    prefix: str = ""

    @property
    def carries_timestamp(self) -> bool:
        return False

    def parse(self, value: str) -> HeaderParts:
        if not value.startswith(self.prefix):
            raise VerificationError("malformed_signature", f"expected prefix {self.prefix!r}")
        signature = value[len(self.prefix) :]
        return HeaderParts((signature,) if signature else ())

    def render(self, signature: str, timestamp: str | None, label: str | None = None) -> str:
        return self.prefix + signature


@dataclass(frozen=True, slots=True)
class KvListFormat:
    """``t=…,v1=…,v1=…``: signatures under ``signature_keys``; other keys are ignored, so a
    provider's decoy scheme (Stripe's ``v0``) can never be what matched. Spaces and tabs
    around each pair are ignored (``t=1, v1=…`` and ``t=1,v1=…`` parse alike); ``render``
    writes ``pair_separator`` as configured."""

    signature_keys: tuple[str, ...]
    pair_separator: str = ","
    kv_separator: str = "="
    timestamp_key: str | None = None

    @property
    def carries_timestamp(self) -> bool:
        return self.timestamp_key is not None

    def parse(self, value: str) -> HeaderParts:
        signatures: list[str] = []
        timestamp: str | None = None
        # Whitespace around a pair is optional whatever the configured separator: WorkOS
        # writes "t=…, v1=…" and its Node SDK splits on ",", so ", " and "," both parse.
        separator = self.pair_separator.strip(" \t") or self.pair_separator
        for item in value.split(separator):
            key, found, text = item.strip(" \t").partition(self.kv_separator)
            if not found:
                continue
            if key == self.timestamp_key:
                if timestamp is not None:  # two timestamps: which one was signed is ambiguous
                    raise VerificationError("malformed_signature", "timestamp given twice")
                timestamp = text
            elif key in self.signature_keys and text:
                signatures.append(text)
        return HeaderParts(tuple(signatures), timestamp)

    def render(self, signature: str, timestamp: str | None, label: str | None = None) -> str:
        pairs = []
        if self.timestamp_key is not None and timestamp is not None:
            pairs.append(f"{self.timestamp_key}{self.kv_separator}{timestamp}")
        pairs.append(f"{self.signature_keys[0]}{self.kv_separator}{signature}")
        return self.pair_separator.join(pairs)


@dataclass(frozen=True, slots=True)
class VersionedListFormat:
    """``v1,<sig> v1a,<sig>``: entries whose version is not accepted are ignored.
    ``algorithms`` maps a version to an algorithm name other than the spec's own (Standard
    Webhooks: ``v1a`` is Ed25519)."""

    versions: tuple[str, ...]
    list_separator: str = " "
    version_separator: str = ","
    algorithms: tuple[tuple[str, str], ...] = ()

    @property
    def carries_timestamp(self) -> bool:
        return False

    def parse(self, value: str) -> HeaderParts:
        signatures: list[str] = []
        labels: list[str] = []
        for entry in value.split(self.list_separator):
            version, found, text = entry.strip(" \t").partition(self.version_separator)
            if found and version in self.versions and text:
                signatures.append(text)
                labels.append(version)
        return HeaderParts(tuple(signatures), None, tuple(labels))

    def render(self, signature: str, timestamp: str | None, label: str | None = None) -> str:
        return f"{label or self.versions[0]}{self.version_separator}{signature}"


def _separators(
    data: Mapping[str, object], path: str, first: tuple[str, str], second: tuple[str, str]
) -> tuple[str, str]:
    a = get_str(data, first[0], path, first[1])
    b = get_str(data, second[0], path, second[1])
    if a == b or a in b or b in a:
        message = f"must differ from (and not contain or be part of) {first[0]}"
        raise ConfigError(join_path(path, second[0]), message)
    return a, b


def _plain(data: Mapping[str, object], path: str) -> SignatureFormat:
    check_keys(data, path, required=("type",), optional=("prefix",), context=" for type plain")
    return PlainFormat(get_str(data, "prefix", path, "", allow_empty=True))


def _kv_list(data: Mapping[str, object], path: str) -> SignatureFormat:
    optional = ("pair_separator", "kv_separator", "timestamp_key")
    required = ("type", "signature_keys")
    check_keys(data, path, required=required, optional=optional, context=" for type kv_list")
    pair, kv = _separators(data, path, ("pair_separator", ","), ("kv_separator", "="))
    keys = get_str_list(data, "signature_keys", path)
    timestamp_key = None
    if data.get("timestamp_key") is not None:
        timestamp_key = get_str(data, "timestamp_key", path)
        if timestamp_key in keys:
            raise ConfigError(join_path(path, "timestamp_key"), "is also a signature key")
    return KvListFormat(keys, pair, kv, timestamp_key)


def _versioned_list(data: Mapping[str, object], path: str) -> SignatureFormat:
    optional = ("list_separator", "version_separator", "algorithms")
    context = " for type versioned_list"
    check_keys(data, path, required=("type", "versions"), optional=optional, context=context)
    items, version = _separators(data, path, ("list_separator", " "), ("version_separator", ","))
    versions = get_str_list(data, "versions", path)
    algorithms: list[tuple[str, str]] = []
    if data.get("algorithms") is not None:
        where = join_path(path, "algorithms")
        mapping = as_mapping(data["algorithms"], where)
        for name in mapping:
            if name not in versions:
                raise ConfigError(join_path(where, name), "is not one of the listed versions")
            algorithms.append((name, get_choice(mapping, name, where, ALGORITHMS, None)))
    return VersionedListFormat(versions, items, version, tuple(algorithms))


FORMATS: dict[str, Callable[[Mapping[str, object], str], SignatureFormat]] = {
    "plain": _plain,
    "kv_list": _kv_list,
    "versioned_list": _versioned_list,
}
