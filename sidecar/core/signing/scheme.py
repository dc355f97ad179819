"""The public entry points: one ``SignatureSpec`` type whether a scheme is data
(``DeclarativeSpec``) or a named plugin (``PluginSpec``), and ``verify``/``sign`` for both.

Both take the request as one ``Delivery`` value (body, headers, method and raw query string),
as the plugins do: URL-signed schemes (Square, HubSpot, Twilio) sign the configured public
URL, to which HubSpot and Twilio add the query string of the request.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TypeAlias

from sidecar.core.fields import as_mapping
from sidecar.core.signing.delivery import Delivery, SignedDelivery
from sidecar.core.signing.keys import (
    decode_declarative_secret,
    decode_declarative_signing_key,
    decode_symmetric_secret,
)
from sidecar.core.signing.plugins import PluginSpec, parse_plugin_spec
from sidecar.core.signing.sign import sign_declarative, stamp_body
from sidecar.core.signing.spec import DeclarativeSpec, parse_declarative_spec
from sidecar.core.signing.verify import verify_declarative

SignatureSpec: TypeAlias = DeclarativeSpec | PluginSpec


def parse_signature_spec(data: object, path: str) -> SignatureSpec:
    """Parse a provider's ``signature:`` block; every error names the key path under ``path``.
    A block with ``plugin:`` names a plugin; any other is declarative."""
    mapping = as_mapping(data, path)
    if "plugin" in mapping:
        return parse_plugin_spec(mapping, path)
    return parse_declarative_spec(mapping, path)


def decode_secret(spec: SignatureSpec, raw: str, path: str) -> bytes:
    """Turn a configured secret into key bytes; ``ConfigError`` (without the secret) if bad.
    For public-key algorithms the result is a ``PublicKey`` (still ``bytes``)."""
    if isinstance(spec, PluginSpec):
        return decode_symmetric_secret(spec.secret, raw, path)
    return decode_declarative_secret(spec, raw, path)


def decode_signing_key(spec: SignatureSpec, raw: str, path: str) -> bytes:
    """Turn a signing key given to ``send`` into the bytes ``sign`` takes: the shared secret,
    or for public-key schemes a ``PrivateKey`` (Discord: hex 32-byte seed; SendGrid: base64
    DER PKCS#8; Standard Webhooks: ``whsk_`` + base64 seed)."""
    if isinstance(spec, PluginSpec):
        return decode_symmetric_secret(spec.secret, raw, path)
    return decode_declarative_signing_key(spec, raw, path)


def verify(spec: SignatureSpec, keys: Sequence[bytes], delivery: Delivery, now: float) -> None:
    """Return if ``delivery`` is authentic under any of ``keys``; else raise
    ``VerificationError`` (and nothing else, whatever the request holds)."""
    if isinstance(spec, PluginSpec):
        spec.scheme.verify(keys, delivery, now)
    else:
        verify_declarative(spec, keys, delivery, now)


def sign_delivery(spec: SignatureSpec, key: bytes, delivery: Delivery,
                  now: float) -> SignedDelivery:
    """Sign as the provider would: the body to send (changed only by schemes that sign inside
    it, Adyen and Mailgun, and by those that carry their timestamp in it, Linear: see
    ``stamp_body``) and the headers to add. ``ValueError`` if it cannot be signed."""
    if isinstance(spec, PluginSpec):
        return spec.scheme.sign(key, delivery, now)
    delivery = dataclasses.replace(delivery, body=stamp_body(spec, delivery.body, now))
    return SignedDelivery(delivery.body, sign_declarative(spec, key, delivery, now))


def sign(spec: SignatureSpec, key: bytes, delivery: Delivery, now: float) -> dict[str, str]:
    """The headers that make ``delivery`` verify (signature, and timestamp if any). For schemes
    that sign inside the body use ``sign_delivery``; here they raise ``ValueError``. The body
    is signed as given: where the timestamp is in it, it must hold a fresh one."""
    if not isinstance(spec, PluginSpec):
        return sign_declarative(spec, key, delivery, now)
    signed = sign_delivery(spec, key, delivery, now)
    if signed.body != delivery.body:
        raise ValueError("this scheme signs inside the body: use sign_delivery")
    return signed.headers
