"""Verify a delivery against a ``SignatureSpec``: a pure function of body, headers, keys and now.

Every failure is a ``VerificationError`` whose ``reason`` is a stable token for logs and
metrics; its detail never contains a secret, a signature or the body.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from sidecar.core.errors import ConfigError, VerificationError
from sidecar.core.signing.spec import (
    SECRET_DECODERS,
    MessageTemplate,
    SignatureSpec,
    TimestampSpec,
)

# Integer timestamps in ASCII digits only: int() would also take "+1", " 1", "1_0" and the
# digits of other scripts.
# 18 digits keep even millisecond values far from any overflow.
_TIMESTAMP = re.compile(r"[0-9]{1,18}")


def header_value(headers: Mapping[str, str], name: str) -> str | None:
    """Case-insensitive header lookup that also works on a plain ``dict``."""
    value = headers.get(name)  # exact key first; a CIMultiDict is already case-insensitive
    if value is not None:
        return value
    wanted = name.lower()
    for key, candidate in headers.items():
        if key.lower() == wanted:
            return candidate
    return None


def decode_secret(spec: SignatureSpec, raw: str, path: str) -> bytes:
    """Turn a configured secret into key bytes; ``ConfigError`` (without the secret) if bad."""
    prefix = spec.secret.strip_prefix
    text = raw[len(prefix) :] if prefix and raw.startswith(prefix) else raw
    try:
        key = SECRET_DECODERS[spec.secret.encoding](text)
    except ValueError:
        after = f" after the {prefix!r} prefix" if prefix else ""
        # from None: the underlying error message may quote characters of the secret.
        raise ConfigError(path, f"secret is not valid {spec.secret.encoding}{after}") from None
    if not key:
        raise ConfigError(path, "secret is empty")
    return key


def signed_message(
    template: MessageTemplate, body: bytes, timestamp: str | None, headers: Mapping[str, str]
) -> bytes:
    """The exact bytes the provider signed: template text, raw body, timestamp as received."""
    chunks: list[bytes] = []
    for part in template.parts:
        if part.kind == "body":
            chunks.append(body)
        elif part.kind == "timestamp":
            if timestamp is None:  # the spec parser forbids this; keep the failure typed
                raise VerificationError("missing_timestamp")
            chunks.append(timestamp.encode("ascii"))
        elif part.kind == "header":
            value = header_value(headers, part.name)
            if value is None:
                raise VerificationError("missing_header", f"signed header {part.name} is absent")
            try:
                # aiohttp decodes header bytes as UTF-8 with surrogateescape: this restores them.
                chunks.append(value.encode("utf-8", "surrogateescape"))
            except UnicodeEncodeError:
                raise VerificationError("bad_signature", f"header {part.name} unusable") from None
        else:
            chunks.append(part.data)
    return b"".join(chunks)


def _check_timestamp(rule: TimestampSpec, text: str | None, now: float) -> None:
    if not text:
        raise VerificationError("missing_timestamp")
    if not _TIMESTAMP.fullmatch(text):
        raise VerificationError("bad_timestamp", "not an integer")
    seconds = int(text) / 1000 if rule.unit == "ms" else int(text)
    age = now - seconds
    # Written as "not within" so that a NaN clock rejects instead of accepting everything.
    if not age <= rule.tolerance:
        raise VerificationError("stale_timestamp", f"{age:.0f}s old")
    if rule.direction == "both" and not -age <= rule.tolerance:
        raise VerificationError("future_timestamp", f"{-age:.0f}s ahead")


def verify(
    spec: SignatureSpec,
    keys: Sequence[bytes],
    body: bytes,
    headers: Mapping[str, str],
    now: float,
) -> None:
    """Return if any (key, signature) pair matches; else raise ``VerificationError``."""
    raw = header_value(headers, spec.header)
    if raw is None or not raw.strip():
        raise VerificationError("missing_signature", f"no {spec.header} header")
    parts = spec.format.parse(raw.strip(" \t"))
    if not parts.signatures:
        raise VerificationError("malformed_signature", "no signature in an accepted form")

    timestamp: str | None = None
    if spec.timestamp is not None:
        if spec.timestamp.header is None:
            timestamp = parts.timestamp
        else:
            timestamp = header_value(headers, spec.timestamp.header)
        _check_timestamp(spec.timestamp, timestamp, now)

    message = signed_message(spec.message, body, timestamp, headers)
    candidates: list[bytes] = []
    for text in parts.signatures:
        try:
            candidates.append(spec.encoding.decode(text))
        except ValueError:
            continue  # undecodable: this candidate simply cannot match
    # Every key is tried (rotation); the result does not depend on which one matched.
    matched = False
    for key in keys:
        matched |= spec.algorithm.verify(key, message, candidates)
    if not matched:
        raise VerificationError("bad_signature")
