"""Public-key signature algorithms: Ed25519 (Discord, Standard Webhooks ``v1a``) and ECDSA
P-256 / SHA-256 with DER-encoded signatures (SendGrid).

Verification keys are *public* keys, so a key that verifies one of these must never be usable as
an HMAC secret (anyone could then forge the HMAC scheme). Keys are therefore typed: a configured
public key is decoded into a ``PublicKey`` and a signing key given to ``sign`` into a
``PrivateKey``; both are ``bytes`` so they travel through the config unchanged.

Key formats (the bytes inside ``PublicKey`` / ``PrivateKey``):

- ``ed25519``: public key = the raw 32 bytes; private key = the raw 32-byte seed (a 64-byte
  NaCl "secret key", seed followed by the public key, is accepted too).
- ``ecdsa-p256-sha256``: public key = DER SubjectPublicKeyInfo; private key = DER PKCS#8.

Pure computation: no I/O. ``cryptography`` is imported at the first key used, so a proxy
whose providers all sign with HMAC never loads it (it starts faster).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey


class PublicKey(bytes):
    """A verification key for an asymmetric algorithm; never used as an HMAC secret."""

    __slots__ = ()


class PrivateKey(bytes):
    """A signing key for an asymmetric algorithm (only ``sign`` and ``send`` use these)."""

    __slots__ = ()


@functools.lru_cache(maxsize=64)
def _ed25519_public(key: bytes) -> Ed25519PublicKey:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    return Ed25519PublicKey.from_public_bytes(bytes(key))


@functools.lru_cache(maxsize=64)
def _p256_public(key: bytes) -> ec.EllipticCurvePublicKey:
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import load_der_public_key

    try:
        loaded = load_der_public_key(bytes(key))
    except (ValueError, UnsupportedAlgorithm):
        raise ValueError("not a DER SubjectPublicKeyInfo") from None
    if not isinstance(loaded, ec.EllipticCurvePublicKey) or loaded.curve.name != "secp256r1":
        raise ValueError("not a P-256 (secp256r1) public key")
    return loaded


class _PublicKeyAlgorithm:
    """An algorithm that verifies with a public key: ``_verifier`` loads the key (``ValueError``
    if it is unusable) and returns its check of one candidate, which raises unless it matches."""

    __slots__ = ()

    @property
    def asymmetric(self) -> bool:
        return True

    def check_key(self, key: bytes) -> None:
        self._verifier(key)

    def _verifier(self, key: bytes) -> Callable[[bytes, bytes], None]:
        raise NotImplementedError

    def verify(self, key: bytes, message: bytes, signatures: Sequence[bytes]) -> bool:
        from cryptography.exceptions import InvalidSignature

        try:
            check = self._verifier(key)
        except ValueError:
            return False
        matched = False
        for candidate in signatures:
            try:
                check(candidate, message)
                matched = True
            except (InvalidSignature, ValueError):
                continue
        return matched


@dataclass(frozen=True, slots=True)
class Ed25519(_PublicKeyAlgorithm):
    name: str = "ed25519"

    def _verifier(self, key: bytes) -> Callable[[bytes, bytes], None]:
        return _ed25519_public(key).verify  # ValueError unless exactly 32 bytes

    def sign(self, key: bytes, message: bytes) -> bytes:
        if len(key) not in (32, 64):
            raise ValueError("an Ed25519 signing key is a 32-byte seed (or 64-byte seed+public)")
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        return Ed25519PrivateKey.from_private_bytes(bytes(key[:32])).sign(message)


@dataclass(frozen=True, slots=True)
class EcdsaP256Sha256(_PublicKeyAlgorithm):
    """ECDSA over P-256 with SHA-256; signatures are DER ``SEQUENCE {r, s}``."""

    name: str = "ecdsa-p256-sha256"

    def _verifier(self, key: bytes) -> Callable[[bytes, bytes], None]:
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec

        public = _p256_public(key)
        return lambda signature, message: public.verify(signature, message,
                                                        ec.ECDSA(hashes.SHA256()))

    def sign(self, key: bytes, message: bytes) -> bytes:
        from cryptography.exceptions import UnsupportedAlgorithm
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.hazmat.primitives.serialization import load_der_private_key

        try:
            private = load_der_private_key(bytes(key), password=None)
        except (ValueError, TypeError, UnsupportedAlgorithm):
            raise ValueError("an ECDSA signing key is a DER PKCS#8 P-256 private key") from None
        if not isinstance(private, ec.EllipticCurvePrivateKey) or (
            private.curve.name != "secp256r1"
        ):
            raise ValueError("an ECDSA signing key is a DER PKCS#8 P-256 private key")
        return private.sign(message, ec.ECDSA(hashes.SHA256()))
