"""Verify a delivery against a ``SignatureSpec``: a pure function of body, headers, keys and now.

Every failure is a ``VerificationError`` whose ``reason`` is a stable token for logs and
metrics; its detail never contains a secret, a signature or the body.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from sidecar.core.body import NotJson, parse_json
from sidecar.core.errors import ConfigError, VerificationError
from sidecar.core.headers import first_header, header_value
from sidecar.core.jsonpath import JsonPath
from sidecar.core.signing.asymmetric import PrivateKey, PublicKey
from sidecar.core.signing.spec import (
    SECRET_DECODERS,
    Algorithm,
    DeclarativeSpec,
    MessageTemplate,
    SecretSpec,
    TimestampSpec,
)

# Integer timestamps in ASCII digits only: int() would also take "+1", " 1", "1_0" and the
# digits of other scripts.
# 18 digits keep even millisecond values far from any overflow.
_TIMESTAMP = re.compile(r"[0-9]{1,18}")
# RFC 3339 date-time (Twitch sends nanoseconds); ASCII digits only.
_RFC3339 = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt]([0-9]{2}):([0-9]{2}):([0-9]{2})(\.[0-9]{1,9})?"
    r"([Zz]|[+-][0-9]{2}:[0-9]{2})"
)


def _decode(encoding: str, text: str) -> bytes:
    return SECRET_DECODERS[encoding](text)


def decode_symmetric_secret(secret: SecretSpec, raw: str, path: str) -> bytes:
    """A shared secret's key bytes; ``ConfigError`` (never quoting the secret) if unusable."""
    prefix = secret.strip_prefix
    text = raw[len(prefix) :] if prefix and raw.startswith(prefix) else raw
    if secret.private_key_prefix and raw.startswith(secret.private_key_prefix):
        raise ConfigError(path, f"a {secret.private_key_prefix!r} private key is not a "
                          "verification secret; configure the public key")
    try:
        key = _decode(secret.encoding, text)
    except ValueError:
        after = f" after the {prefix!r} prefix" if prefix else ""
        # from None: the underlying error message may quote characters of the secret.
        raise ConfigError(path, f"secret is not valid {secret.encoding}{after}") from None
    if not key:
        raise ConfigError(path, "secret is empty")
    return key


def _decode_asymmetric(spec: DeclarativeSpec, text: str, path: str, what: str) -> bytes:
    try:
        key = _decode(spec.secret.encoding, text)
    except ValueError:
        raise ConfigError(path, f"{what} is not valid {spec.secret.encoding}") from None
    if not key:
        raise ConfigError(path, f"{what} is empty")
    return key


def decode_declarative_secret(spec: DeclarativeSpec, raw: str, path: str) -> bytes:
    """A configured secret: a ``PublicKey`` for the scheme's public-key algorithm (every secret
    of a purely public-key scheme, or one with ``public_key_prefix`` in a mixed scheme), else
    the shared secret's bytes."""
    asymmetric = spec.asymmetric_algorithm
    public_prefix = spec.secret.public_key_prefix
    if asymmetric is not None and (
        not spec.has_symmetric or (public_prefix and raw.startswith(public_prefix))
    ):
        if spec.secret.private_key_prefix and raw.startswith(spec.secret.private_key_prefix):
            raise ConfigError(path, "this is a private key; configure the public key")
        for prefix in (public_prefix, spec.secret.strip_prefix):
            if prefix and raw.startswith(prefix):
                raw = raw[len(prefix) :]
                break
        key = _decode_asymmetric(spec, raw, path, "public key")
        try:
            asymmetric.check_key(key)
        except ValueError as exc:
            raise ConfigError(path, f"not a usable {asymmetric.name} public key: {exc}") from None
        return PublicKey(key)
    shared_prefix = spec.secret.strip_prefix
    private_prefix = spec.secret.private_key_prefix
    if private_prefix and raw.startswith(private_prefix):
        raise ConfigError(path, "this is a private key; configure the public key")
    if asymmetric is not None and public_prefix and shared_prefix \
            and not raw.startswith(shared_prefix):
        # In a scheme that mixes shared secrets and public keys, an unmarked value could be a
        # public key pasted without its prefix: used as an HMAC secret, anyone could sign.
        raise ConfigError(path, f"must start with {shared_prefix!r} (a shared secret) or "
                          f"{public_prefix!r} (a public key)")
    return decode_symmetric_secret(spec.secret, raw, path)


def decode_declarative_signing_key(spec: DeclarativeSpec, raw: str, path: str) -> bytes:
    """A key for ``sign``: a ``PrivateKey`` for the public-key algorithm (every key of a purely
    public-key scheme, or one with ``private_key_prefix``), else the shared secret."""
    asymmetric = spec.asymmetric_algorithm
    private_prefix = spec.secret.private_key_prefix
    if asymmetric is not None and (
        not spec.has_symmetric or (private_prefix and raw.startswith(private_prefix))
    ):
        if private_prefix and raw.startswith(private_prefix):
            raw = raw[len(private_prefix) :]
        key = PrivateKey(_decode_asymmetric(spec, raw, path, "private key"))
        try:
            asymmetric.sign(key, b"probe")
        except ValueError as exc:
            raise ConfigError(path, f"not a usable {asymmetric.name} private key: {exc}") from None
        return key
    return decode_symmetric_secret(spec.secret, raw, path)


def signing_url(spec: DeclarativeSpec, query: str) -> str | None:
    """``{url}``: the configured public URL, plus ``?query`` when ``append_query`` is set."""
    if spec.url is None:
        return None
    if spec.append_query and query:
        return f"{spec.url}{'&' if '?' in spec.url else '?'}{query}"
    return spec.url


def _surrogate_safe(value: str, what: str) -> bytes:
    try:
        # aiohttp decodes header bytes as UTF-8 with surrogateescape: this restores them.
        return value.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        raise VerificationError("bad_signature", f"{what} unusable") from None


def signed_message(
    template: MessageTemplate,
    body: bytes,
    timestamp: str | None,
    headers: Mapping[str, str],
    *,
    method: str = "POST",
    url: str | None = None,
) -> bytes:
    """The exact bytes the provider signed: template text, raw body, timestamp as received,
    the request method and the configured public URL."""
    chunks: list[bytes] = []
    for part in template.parts:
        if part.kind == "body":
            chunks.append(body)
        elif part.kind == "timestamp":
            if timestamp is None:  # the spec parser forbids this; keep the failure typed
                raise VerificationError("missing_timestamp")
            chunks.append(_surrogate_safe(timestamp, "timestamp"))
        elif part.kind == "header":
            value = header_value(headers, part.name)
            if value is None:
                raise VerificationError("missing_header", f"signed header {part.name} is absent")
            chunks.append(_surrogate_safe(value, f"header {part.name}"))
        elif part.kind == "method":
            chunks.append(_surrogate_safe(method, "method"))
        elif part.kind == "url":
            if url is None:  # the spec parser requires signature.url; keep the failure typed
                raise VerificationError("missing_url", "no public URL configured")
            chunks.append(_surrogate_safe(url, "url"))
        else:
            chunks.append(part.data)
    return b"".join(chunks)


def parse_rfc3339(text: str) -> float:
    """Seconds since the epoch of an RFC 3339 date-time (``2023-03-01T12:34:56.123456789Z``);
    ``VerificationError("bad_timestamp")`` for anything else."""
    match = _RFC3339.fullmatch(text)
    if match is None:
        raise VerificationError("bad_timestamp", "not an RFC 3339 date-time")
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    try:
        moment = datetime(int(year), int(month), int(day), int(hour), int(minute), int(second),
                          tzinfo=UTC)
    except ValueError:
        raise VerificationError("bad_timestamp", "not a valid date-time") from None
    offset = 0
    if zone not in ("Z", "z"):
        sign = -1 if zone[0] == "-" else 1
        hours, minutes = int(zone[1:3]), int(zone[4:6])
        if hours > 23 or minutes > 59:
            raise VerificationError("bad_timestamp", "bad UTC offset")
        offset = sign * (hours * 3600 + minutes * 60)
    seconds = moment.timestamp() - offset
    if fraction:
        seconds += int(fraction[1:]) / 10 ** (len(fraction) - 1)
    return seconds


def check_timestamp(rule: TimestampSpec, text: str | None, now: float) -> None:
    """Reject a missing, malformed, too old or (``direction: both``) too new timestamp."""
    if not text:
        raise VerificationError("missing_timestamp")
    if rule.unit == "rfc3339":
        seconds = parse_rfc3339(text)
    else:
        if not _TIMESTAMP.fullmatch(text):
            raise VerificationError("bad_timestamp", "not an integer")
        seconds = int(text) / 1000 if rule.unit == "ms" else int(text)
    age = now - seconds
    # Written as "not within" so that a NaN clock rejects instead of accepting everything.
    if not age <= rule.tolerance:
        raise VerificationError("stale_timestamp", f"{age:.0f}s old")
    if rule.direction == "both" and not -age <= rule.tolerance:
        raise VerificationError("future_timestamp", f"{-age:.0f}s ahead")


def _usable(spec: DeclarativeSpec, algorithm: Algorithm, key: bytes) -> bool:
    """Which keys an algorithm may use: a public key never keys an HMAC, and in a scheme that
    also has shared secrets only a typed ``PublicKey`` verifies a public-key signature."""
    if isinstance(key, PrivateKey):
        return False
    if algorithm.asymmetric:
        return isinstance(key, PublicKey) or not spec.has_symmetric
    return not isinstance(key, PublicKey)


def verify_declarative(
    spec: DeclarativeSpec,
    keys: Sequence[bytes],
    body: bytes,
    headers: Mapping[str, str],
    now: float,
    *,
    method: str = "POST",
    query: str = "",
) -> None:
    """Return if any (key, signature) pair matches; else raise ``VerificationError``."""
    raw = first_header(headers, spec.headers)
    if raw is None or not raw.strip():
        raise VerificationError("missing_signature", f"no {' or '.join(spec.headers)} header")
    parts = spec.format.parse(raw.strip(" \t"))
    if not parts.signatures:
        raise VerificationError("malformed_signature", "no signature in an accepted form")

    timestamp: str | None = None
    if spec.timestamp is not None and spec.timestamp.json is None:
        if spec.timestamp.header is None:
            timestamp = parts.timestamp
        else:
            timestamp = first_header(headers, spec.timestamp.headers)
        check_timestamp(spec.timestamp, timestamp, now)

    message = signed_message(spec.message, body, timestamp, headers, method=method,
                             url=signing_url(spec, query))
    # Candidates grouped by the algorithm their version selects (one group when unversioned).
    groups: dict[str, tuple[Algorithm, list[bytes]]] = {}
    labels = parts.labels or ("",) * len(parts.signatures)
    for label, text in zip(labels, parts.signatures, strict=True):
        algorithm = spec.algorithm_for(label)
        try:
            candidate = spec.encoding.decode(text)
        except ValueError:
            continue  # undecodable: this candidate simply cannot match
        groups.setdefault(algorithm.name, (algorithm, []))[1].append(candidate)
    # Every key is tried (rotation); the result does not depend on which one matched.
    matched = False
    for algorithm, candidates in groups.values():
        for key in keys:
            if _usable(spec, algorithm, key):
                matched |= algorithm.verify(key, message, candidates)
    if not matched:
        raise VerificationError("bad_signature")
    rule = spec.timestamp
    if rule is not None and rule.json is not None:
        # Read only now that the body is authentic (nothing is decoded before verifying).
        check_timestamp(rule, body_timestamp(rule, rule.json, body), now)


def body_timestamp(rule: TimestampSpec, path: JsonPath, body: bytes) -> str | None:
    """The timestamp at ``path`` in a JSON body as text, ``None`` when absent
    (``missing_timestamp``). Unix seconds or milliseconds must be a JSON integer (as Linear's
    SDK wants a number), an RFC 3339 time a string; anything else is refused by
    ``check_timestamp`` as ``bad_timestamp``."""
    try:
        found, value = path.lookup(parse_json(body))
    except NotJson:
        return None
    if not found or value is None:
        return None
    if rule.unit == "rfc3339":
        return value if isinstance(value, str) else "not a string"
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return "not an integer"
