"""Declarative webhook signature schemes: parse a spec, verify a delivery, sign one.

Pure functions: no I/O, no clock (``now`` is passed in), no aiohttp or asyncpg.

Where things are: ``scheme`` (the entry points for both kinds of scheme), ``spec`` (a
declarative ``signature:`` block parsed), with its registries ``algorithms``, ``formats``,
``encodings`` and its ``template``; ``verify`` and ``sign`` (declarative schemes), ``keys``
(secrets and keys decoded, which key each algorithm may use), ``timestamps``; ``plugins`` (the
schemes data cannot describe); ``forward`` (the proxy's own signature on forwards).
"""

from sidecar.core.signing.algorithms import ALGORITHMS, Algorithm
from sidecar.core.signing.asymmetric import PrivateKey, PublicKey
from sidecar.core.signing.delivery import Delivery, SignedDelivery
from sidecar.core.signing.encodings import ENCODINGS, SECRET_DECODERS, Codec
from sidecar.core.signing.formats import (
    FORMATS,
    HeaderParts,
    KvListFormat,
    PlainFormat,
    SignatureFormat,
    VersionedListFormat,
)
from sidecar.core.signing.plugins import PLUGINS, PluginSpec
from sidecar.core.signing.scheme import (
    SignatureSpec,
    decode_secret,
    decode_signing_key,
    parse_signature_spec,
    sign,
    sign_delivery,
    verify,
)
from sidecar.core.signing.spec import DeclarativeSpec, SecretSpec, TimestampSpec
from sidecar.core.signing.template import MessageTemplate, signed_message

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
