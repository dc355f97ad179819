"""Declarative webhook signature schemes: parse a spec, verify a delivery, sign one.

Pure functions: no I/O, no clock (``now`` is passed in), no aiohttp or asyncpg.
"""

from sidecar.core.signing.sign import sign
from sidecar.core.signing.spec import (
    ALGORITHMS,
    ENCODINGS,
    FORMATS,
    SECRET_DECODERS,
    Algorithm,
    Codec,
    HeaderParts,
    KvListFormat,
    MessageTemplate,
    PlainFormat,
    SecretSpec,
    SignatureFormat,
    SignatureSpec,
    TimestampSpec,
    VersionedListFormat,
    parse_signature_spec,
)
from sidecar.core.signing.verify import decode_secret, header_value, signed_message, verify

__all__ = [
    "ALGORITHMS",
    "ENCODINGS",
    "FORMATS",
    "SECRET_DECODERS",
    "Algorithm",
    "Codec",
    "HeaderParts",
    "KvListFormat",
    "MessageTemplate",
    "PlainFormat",
    "SecretSpec",
    "SignatureFormat",
    "SignatureSpec",
    "TimestampSpec",
    "VersionedListFormat",
    "decode_secret",
    "header_value",
    "parse_signature_spec",
    "sign",
    "signed_message",
    "verify",
]
