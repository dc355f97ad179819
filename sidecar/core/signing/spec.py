"""The signature scheme a provider block declares (``signature:`` without ``plugin:``), parsed
strictly into one frozen ``DeclarativeSpec``: its algorithm (``algorithms.py``), header format
(``formats.py``), encoding and secret encoding (``encodings.py``), message (``template.py``),
secret and timestamp rules. Those registries are the extension points: a new algorithm, format
or encoding is one entry, and providers stay data. Nothing here touches the network, the clock
or the request body.
"""

from __future__ import annotations

from dataclasses import dataclass

from sidecar.core.durations import parse_duration
from sidecar.core.errors import ConfigError
from sidecar.core.fields import (
    as_mapping,
    check_keys,
    get_choice,
    get_header_names,
    get_str,
    join_path,
    parse_public_url,
)
from sidecar.core.jsonpath import JsonPath, parse_json_path
from sidecar.core.signing.algorithms import ALGORITHMS, Algorithm
from sidecar.core.signing.encodings import ENCODINGS, SECRET_DECODERS, Codec
from sidecar.core.signing.formats import FORMATS, SignatureFormat, VersionedListFormat
from sidecar.core.signing.template import MessageTemplate, parse_template


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

    def signing_url(self, query: str) -> str | None:
        """``{url}``: the configured public URL, plus ``?query`` when ``append_query`` is set."""
        if self.url is None:
            return None
        if self.append_query and query:
            return f"{self.url}{'&' if '?' in self.url else '?'}{query}"
        return self.url

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
