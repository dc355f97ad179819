"""Declarative webhook signature schemes: parse a spec, verify a delivery, sign one.

Pure functions: no I/O, no clock (``now`` is passed in), no aiohttp or asyncpg.
"""

from sidecar.core.signing.asymmetric import PrivateKey, PublicKey
from sidecar.core.signing.plugins import PLUGINS, Delivery, PluginSpec, SignedDelivery
from sidecar.core.signing.scheme import (
    SignatureSpec,
    decode_secret,
    decode_signing_key,
    parse_signature_spec,
    sign,
    sign_delivery,
    verify,
)
from sidecar.core.signing.spec import (
    ALGORITHMS,
    ENCODINGS,
    FORMATS,
    SECRET_DECODERS,
    Algorithm,
    Codec,
    DeclarativeSpec,
    HeaderParts,
    KvListFormat,
    MessageTemplate,
    PlainFormat,
    SecretSpec,
    SignatureFormat,
    TimestampSpec,
    VersionedListFormat,
)
from sidecar.core.signing.verify import signed_message

__all__ = [
    "ALGORITHMS",
    "ENCODINGS",
    "FORMATS",
    "PLUGINS",
    "SECRET_DECODERS",
    "Algorithm",
    "Codec",
    "DeclarativeSpec",
    "Delivery",
    "HeaderParts",
    "KvListFormat",
    "MessageTemplate",
    "PlainFormat",
    "PluginSpec",
    "PrivateKey",
    "PublicKey",
    "SecretSpec",
    "SignatureFormat",
    "SignatureSpec",
    "SignedDelivery",
    "TimestampSpec",
    "VersionedListFormat",
    "decode_secret",
    "decode_signing_key",
    "parse_signature_spec",
    "sign",
    "sign_delivery",
    "signed_message",
    "verify",
]
