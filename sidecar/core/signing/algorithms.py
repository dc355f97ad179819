"""Signature algorithms by the name a ``signature:`` block gives them (``ALGORITHMS``): a new
algorithm is one entry. The public-key ones are in ``asymmetric.py``."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from sidecar.core.signing.asymmetric import EcdsaP256Sha256, Ed25519


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


class _SharedKey:
    """An algorithm keyed by a shared secret: any bytes are a usable key."""

    __slots__ = ()

    @property
    def asymmetric(self) -> bool:
        return False

    def check_key(self, key: bytes) -> None:
        return None


@dataclass(frozen=True, slots=True)
class Hmac(_SharedKey):
    name: str
    digest: str

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
class Token(_SharedKey):
    """A shared token sent as is (GitLab's ``X-Gitlab-Token``): the "signature" is the header
    value itself and the key is the configured token. Nothing is signed, so the message is
    ignored. Compared as SHA-256 digests so neither the content nor the length leaks."""

    name: str = "token"

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
