"""The signature scheme a provider block declares, parsed strictly into frozen values.

The registries below (``ALGORITHMS``, ``ENCODINGS``, ``SECRET_DECODERS``, ``FORMATS``) are the
extension points: a new algorithm or header format is one entry, and providers stay data.
Nothing here touches the network, the clock or the request body.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from sidecar.core.durations import parse_duration
from sidecar.core.errors import ConfigError, VerificationError
from sidecar.core.fields import (
    as_mapping,
    check_keys,
    get_choice,
    get_header_names,
    get_str,
    get_str_list,
    is_header_name,
    join_path,
    parse_public_url,
)
from sidecar.core.jsonpath import JsonPath, parse_json_path
from sidecar.core.signing.asymmetric import EcdsaP256Sha256, Ed25519

# --- algorithms -----------------------------------------------------------------------------


class Algorithm(Protocol):
    """Signs and verifies a message with one key. ``verify`` must compare in constant time
    (symmetric algorithms) and must not raise: a malformed key or candidate simply fails.

    ``asymmetric`` algorithms verify with a public key and sign with a private key (see
    ``asymmetric.py`` for the key formats); ``check_key`` raises ``ValueError`` when a
    configured verification key is unusable, so that config loading can reject it."""

    @property
    def name(self) -> str: ...

    @property
    def asymmetric(self) -> bool: ...

    def check_key(self, key: bytes) -> None: ...

    def sign(self, key: bytes, message: bytes) -> bytes: ...

    def verify(self, key: bytes, message: bytes, signatures: Sequence[bytes]) -> bool: ...


@dataclass(frozen=True, slots=True)
class Hmac:
    name: str
    digest: str

    @property
    def asymmetric(self) -> bool:
        return False

    def check_key(self, key: bytes) -> None:
        return None

    def sign(self, key: bytes, message: bytes) -> bytes:
        return hmac.new(key, message, self.digest).digest()

    def verify(self, key: bytes, message: bytes, signatures: Sequence[bytes]) -> bool:
        # One MAC per key however many candidates the header lists; no early exit.
        expected = self.sign(key, message)
        matched = False
        for candidate in signatures:
            matched |= hmac.compare_digest(expected, candidate)
        return matched


@dataclass(frozen=True, slots=True)
class Token:
    """A shared token sent as is (GitLab's ``X-Gitlab-Token``): the "signature" is the header
    value itself and the key is the configured token. Nothing is signed, so the message is
    ignored. Compared as SHA-256 digests so neither the content nor the length leaks."""

    name: str = "token"

    @property
    def asymmetric(self) -> bool:
        return False

    def check_key(self, key: bytes) -> None:
        return None

    def sign(self, key: bytes, message: bytes) -> bytes:
        return bytes(key)

    def verify(self, key: bytes, message: bytes, signatures: Sequence[bytes]) -> bool:
        expected = hashlib.sha256(key).digest()
        matched = False
        for candidate in signatures:
            matched |= hmac.compare_digest(expected, hashlib.sha256(candidate).digest())
        return matched


ALGORITHMS: dict[str, Algorithm] = {
    "hmac-sha256": Hmac("hmac-sha256", "sha256"),
    "hmac-sha1": Hmac("hmac-sha1", "sha1"),
    "ed25519": Ed25519(),
    "ecdsa-p256-sha256": EcdsaP256Sha256(),
    "token": Token(),
}

# --- encodings ------------------------------------------------------------------------------


def _hex_decode(text: str) -> bytes:
    # unhexlify, unlike bytes.fromhex, rejects embedded whitespace. Both cases are accepted:
    # the decoded bytes are what is compared.
    return binascii.unhexlify(text.encode("ascii"))


def _base64_decode(text: str) -> bytes:
    # Standard alphabet, padded or not; validate=True rejects any other character.
    data = text.encode("ascii")
    return base64.b64decode(data + b"=" * (-len(data) % 4), validate=True)


@dataclass(frozen=True, slots=True)
class Codec:
    """Text form of signature bytes. ``decode`` raises ``ValueError`` on malformed text."""

    name: str
    encode: Callable[[bytes], str] = field(repr=False)
    decode: Callable[[str], bytes] = field(repr=False)


ENCODINGS: dict[str, Codec] = {
    "hex": Codec("hex", bytes.hex, _hex_decode),
    "base64": Codec("base64", lambda raw: base64.b64encode(raw).decode("ascii"), _base64_decode),
    # The header value as text (the `token` algorithm). Undecodable text cannot match.
    "utf8": Codec("utf8", lambda raw: raw.decode("utf-8"), lambda text: text.encode("utf-8")),
}

# How the configured secret text becomes key bytes; each raises ValueError on bad input.
SECRET_DECODERS: dict[str, Callable[[str], bytes]] = {
    "utf8": lambda text: text.encode("utf-8"),
    "base64": _base64_decode,
    "hex": _hex_decode,
}

# --- signature header formats ---------------------------------------------------------------


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

# --- message template -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Part:
    """One piece of the signed message: ``text`` (``data`` holds its UTF-8), ``body``,
    ``timestamp``, ``header`` (``name`` is the header), ``url`` (the configured public URL)
    or ``method`` (the request's HTTP method)."""

    kind: str
    data: bytes = b""
    name: str = ""


@dataclass(frozen=True, slots=True)
class MessageTemplate:
    source: str
    parts: tuple[Part, ...] = field(repr=False)

    @property
    def uses_timestamp(self) -> bool:
        return any(part.kind == "timestamp" for part in self.parts)

    @property
    def uses_url(self) -> bool:
        return any(part.kind == "url" for part in self.parts)


_PLACEHOLDER = re.compile(r"\{\{|\}\}|\{([^{}]*)\}|[{}]")


def parse_template(text: str, path: str) -> MessageTemplate:
    """``{body}``, ``{timestamp}``, ``{header:Name}``, ``{url}``, ``{method}``; ``{{``/``}}``
    are literal braces."""
    parts: list[Part] = []
    literal: list[str] = []

    def flush() -> None:
        text = "".join(literal)
        literal.clear()
        if text:
            parts.append(Part("text", text.encode("utf-8")))

    position = 0
    for match in _PLACEHOLDER.finditer(text):
        literal.append(text[position : match.start()])
        position = match.end()
        token, name = match[0], match[1]
        if token in ("{{", "}}"):
            literal.append(token[0])
            continue
        if name is None:
            raise ConfigError(path, "unbalanced brace; write {{ or }} for a literal one")
        flush()
        if name in ("body", "timestamp", "url", "method"):
            parts.append(Part(name))
        elif name.startswith("header:") and is_header_name(name[7:]):
            parts.append(Part("header", name=name[7:]))
        else:
            hint = "use {body}, {timestamp}, {header:Name}, {url} or {method}"
            raise ConfigError(path, f"unknown placeholder {{{name}}}; {hint}")
    literal.append(text[position:])
    flush()
    if not any(part.kind == "body" for part in parts):
        raise ConfigError(path, "must include {body}: a signature that omits it proves nothing")
    return MessageTemplate(text, tuple(parts))


# --- the whole spec -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SecretSpec:
    """How a configured secret becomes key bytes.

    ``public_key_prefix``: in a scheme that mixes HMAC and public-key versions (Standard
    Webhooks ``v1``/``v1a``), a secret with this prefix (``whpk_``) is a public key, any other
    is a shared secret; the two are never interchangeable. ``private_key_prefix`` (``whsk_``)
    marks a private key given to ``sign``/``send``; it is never a valid verification secret."""

    encoding: str = "utf8"
    strip_prefix: str = ""
    public_key_prefix: str = ""
    private_key_prefix: str = ""


@dataclass(frozen=True, slots=True)
class TimestampSpec:
    header: str | None  # None: in the signature header (format's timestamp key) or the body
    unit: str  # "s" | "ms" | "rfc3339"
    tolerance: float  # seconds
    direction: str  # "both" rejects too old and too new; "past" only too old
    alternative_headers: tuple[str, ...] = ()  # read when ``header`` is absent, in order
    # In the signed JSON body (Linear's $.webhookTimestamp): checked once the body is verified.
    json: JsonPath | None = None

    @property
    def headers(self) -> tuple[str, ...]:
        """Every name the timestamp header may have (none: it is in the signature header)."""
        return () if self.header is None else (self.header, *self.alternative_headers)


@dataclass(frozen=True, slots=True)
class DeclarativeSpec:
    """A signature scheme described entirely by data (the ``signature:`` block)."""

    algorithm: Algorithm
    header: str  # the signature header: the first of ``headers``, the one ``sign`` writes
    format: SignatureFormat
    encoding: Codec
    message: MessageTemplate
    secret: SecretSpec
    timestamp: TimestampSpec | None
    url: str | None = None  # the public URL the provider signs ({url}), from config
    append_query: bool = False  # {url} also carries "?" + the request's query string
    version_algorithms: tuple[tuple[str, Algorithm], ...] = ()
    alternative_headers: tuple[str, ...] = ()  # read when ``header`` is absent, in order

    @property
    def headers(self) -> tuple[str, ...]:
        """Every name the signature header may have; the first one present is read."""
        return (self.header, *self.alternative_headers)

    def algorithm_for(self, label: str) -> Algorithm:
        for version, algorithm in self.version_algorithms:
            if version == label:
                return algorithm
        return self.algorithm

    @property
    def algorithms(self) -> tuple[Algorithm, ...]:
        found = [self.algorithm]
        for _, algorithm in self.version_algorithms:
            if algorithm not in found:
                found.append(algorithm)
        return tuple(found)

    @property
    def asymmetric_algorithm(self) -> Algorithm | None:
        return next((a for a in self.algorithms if a.asymmetric), None)

    @property
    def has_symmetric(self) -> bool:
        return any(not a.asymmetric for a in self.algorithms)

    def label_for(self, algorithm: Algorithm) -> str | None:
        """The first version signed with ``algorithm`` (for ``sign``); None if unversioned."""
        if not isinstance(self.format, VersionedListFormat):
            return None
        for version in self.format.versions:
            if self.algorithm_for(version) == algorithm:
                return version
        return None


_SPEC_KEYS = ("algorithm", "header", "format", "encoding", "message", "secret", "timestamp",
              "url", "append_query")
_TOKEN_UNUSED = ("message", "timestamp", "url", "append_query")


def _parse_secret(data: object, path: str) -> SecretSpec:
    mapping = as_mapping(data, path)
    optional = ("encoding", "strip_prefix", "public_key_prefix", "private_key_prefix")
    check_keys(mapping, path, optional=optional)
    return SecretSpec(
        get_choice(mapping, "encoding", path, SECRET_DECODERS, "utf8"),
        get_str(mapping, "strip_prefix", path, "", allow_empty=True),
        get_str(mapping, "public_key_prefix", path, "", allow_empty=True),
        get_str(mapping, "private_key_prefix", path, "", allow_empty=True),
    )


def _parse_timestamp(data: object, path: str, fmt: SignatureFormat) -> TimestampSpec:
    mapping = as_mapping(data, path)
    check_keys(mapping, path,
               optional=("header", "from", "json", "unit", "tolerance", "direction"))
    header_names: tuple[str, ...] = ()
    json_path: JsonPath | None = None
    sources = [key for key in ("header", "from", "json") if key in mapping]
    if len(sources) > 1:
        raise ConfigError(join_path(path, sources[1]), "give one of header, from or json")
    if "json" in mapping:
        json_path = parse_json_path(mapping["json"], join_path(path, "json"))
    elif "from" in mapping:
        get_choice(mapping, "from", path, ("signature",), None)
        if not fmt.carries_timestamp:
            raise ConfigError(
                join_path(path, "from"), "the signature format carries no timestamp_key"
            )
    elif "header" in mapping:
        header_names = get_header_names(mapping, "header", path)
    else:
        raise ConfigError(join_path(path, "header"), "required (or from: signature, or json: "
                          "a path in the signed body)")
    tolerance_path = join_path(path, "tolerance")
    tolerance = parse_duration(mapping.get("tolerance", 300), tolerance_path)
    if tolerance <= 0:
        raise ConfigError(tolerance_path, "must be more than zero")
    return TimestampSpec(
        header_names[0] if header_names else None,
        get_choice(mapping, "unit", path, ("s", "ms", "rfc3339"), "s"),
        tolerance,
        get_choice(mapping, "direction", path, ("both", "past"), "both"),
        header_names[1:],
        json_path,
    )


def _check_algorithms(spec: DeclarativeSpec, path: str) -> None:
    asymmetric = {a.name for a in spec.algorithms if a.asymmetric}
    if len(asymmetric) > 1:
        raise ConfigError(join_path(path, "format.algorithms"),
                          "at most one public-key algorithm per scheme (keys would be ambiguous)")
    if asymmetric and spec.has_symmetric and not spec.secret.public_key_prefix:
        raise ConfigError(
            join_path(path, "secret.public_key_prefix"),
            "required when a scheme mixes shared secrets and public keys (e.g. whpk_), so a "
            "public key can never be used as an HMAC secret",
        )
    if spec.algorithm.name == "token" and len(spec.algorithms) > 1:
        raise ConfigError(join_path(path, "format.algorithms"), "not used with algorithm token")


def parse_declarative_spec(data: object, path: str) -> DeclarativeSpec:
    """Parse a declarative ``signature:`` block; every error names the key path."""
    mapping = as_mapping(data, path)
    check_keys(mapping, path, optional=_SPEC_KEYS)  # unknown keys first: typos are common
    algorithm = ALGORITHMS[get_choice(mapping, "algorithm", path, ALGORITHMS, None)]
    is_token = algorithm.name == "token"
    if is_token:
        for key in _TOKEN_UNUSED:
            if mapping.get(key) is not None:
                raise ConfigError(join_path(path, key),
                                  "not used by algorithm token (the header is the token)")
        required: tuple[str, ...] = ("algorithm", "header", "format")
    else:
        required = ("algorithm", "header", "format", "encoding", "message")
    check_keys(mapping, path, required=required, optional=_SPEC_KEYS)
    headers = get_header_names(mapping, "header", path)
    format_path = join_path(path, "format")
    format_data = as_mapping(mapping["format"], format_path)
    format_type = get_choice(format_data, "type", format_path, FORMATS, None)
    fmt = FORMATS[format_type](format_data, format_path)
    default_encoding = "utf8" if is_token else None
    encoding = ENCODINGS[get_choice(mapping, "encoding", path, ENCODINGS, default_encoding)]
    message_path = join_path(path, "message")
    message = parse_template(
        "{body}" if is_token else get_str(mapping, "message", path), message_path
    )
    secret_data = mapping.get("secret")
    secret = _parse_secret({} if secret_data is None else secret_data, join_path(path, "secret"))
    timestamp = None
    if mapping.get("timestamp") is not None:
        timestamp = _parse_timestamp(mapping["timestamp"], join_path(path, "timestamp"), fmt)

    in_body = timestamp is not None and timestamp.json is not None
    if message.uses_timestamp and (timestamp is None or in_body):
        raise ConfigError(message_path, "uses {timestamp} but no timestamp is set" if not in_body
                          else "uses {timestamp}, but the timestamp is read from the body")
    # An unsigned timestamp can be replaced by an attacker: tolerance would prove nothing.
    # (A timestamp in the body is signed: every message signs {body}.)
    if timestamp is not None and not in_body and not message.uses_timestamp:
        raise ConfigError(join_path(path, "timestamp"), "the message must sign {timestamp}")
    if fmt.carries_timestamp and (timestamp is None or timestamp.header is not None):
        raise ConfigError(
            join_path(format_path, "timestamp_key"), "needs timestamp: {from: signature}"
        )
    url: str | None = None
    if message.uses_url:
        if mapping.get("url") is None:
            raise ConfigError(join_path(path, "url"), "required: the message signs {url}, the "
                              "public URL the provider calls (e.g. ${PUBLIC_URL}/webhooks/x); "
                              "behind a proxy the request's own URL is not the signed one")
        url = parse_public_url(mapping, "url", path)
    elif mapping.get("url") is not None:
        raise ConfigError(join_path(path, "url"), "the message does not use {url}")
    append_query = mapping.get("append_query", False)
    if not isinstance(append_query, bool):
        raise ConfigError(join_path(path, "append_query"), "must be true or false")
    if append_query and url is None:
        raise ConfigError(join_path(path, "append_query"), "needs {url} in the message")

    version_algorithms: tuple[tuple[str, Algorithm], ...] = ()
    if isinstance(fmt, VersionedListFormat):
        version_algorithms = tuple((v, ALGORITHMS[name]) for v, name in fmt.algorithms)
    spec = DeclarativeSpec(algorithm, headers[0], fmt, encoding, message, secret, timestamp,
                           url, append_query, version_algorithms, headers[1:])
    _check_algorithms(spec, path)
    return spec
